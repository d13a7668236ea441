"""Scripted generator and judge backends for training tests: a constant answer, and seeded random
scores that give every GRPO group reward variance (so every step has a gradient)."""

from __future__ import annotations

import random


class ConstantGenerator:
    """Answers every request with ``answer``."""

    name = "constant"

    def __init__(self, answer: str = "2021") -> None:
        self.answer = answer

    async def generate(self, reqs):
        from ddai.pipelines.backends import GenerateResult

        return [GenerateResult(answer=self.answer) for _ in reqs]


class RandomJudge:
    """Seeded uniform scores; ``calls`` counts the requests judged."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.calls = 0

    async def judge(self, reqs):
        from ddai.pipelines.backends import JudgeResult

        self.calls += len(reqs)
        return [JudgeResult(score=self.rng.random()) for _ in reqs]
