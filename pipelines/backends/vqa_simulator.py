"""``VQASimulator``: a deterministic stand-in for a VQA model, for the synthetic world.

``answer(prompt, examples, meta)`` reads the latent fields the world writes (the query's
``answer_type``, ``topic``, ``answer``, ``answers``, ``distractor``; each example's
``answer_type``, ``topic``, ``clean``) and answers correctly with probability

    p = base + (peak - base) · mean_i h(example_i)

where ``h`` is 1 for a clean demonstration of the query's answer type, ``same_type_noisy`` for a
noisy one of that type, ``same_topic`` for another type from the same scene, else 0. Whether it is
correct is a hash of (seed, world seed, query id, the sorted demonstration ids), so the same pair
in either order always gets the same answer and nothing depends on call order or process. A wrong
answer is, with probability ``partial``, the most common minority human answer (partial VQA
credit), else the query's ``distractor``. A right answer comes in an annotator-like surface form
("2", "Two.", "two") that the VQAv2 normalization maps back. The ``prompt`` does not change the
answer; it only stands in for the query id when ``meta`` has none.

``SimulatorVQA`` is the local VQA backend (kind ``simulator``) over it: ``simulator=`` given to
``get_backend`` is used as is; otherwise the backend's options (``seed``, ``base``, ``peak``, ...)
build one.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddai.pipelines.backends.base import VQARequest, VQAResult
from ddai.pipelines.backends.local import LocalBackend
from ddai.pipelines.records.metrics import vqa_normalize

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _uniform(*parts: object) -> float:
    """A uniform number in [0, 1) from a stable hash of ``parts``."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass(frozen=True)
class VQASimulator:
    """Deterministic VQA answers whose correctness depends on the chosen demonstrations."""

    seed: int = 0
    base: float = 0.1  # p(correct) with no helpful demonstration
    peak: float = 0.95  # p(correct) with two clean demonstrations of the query's answer type
    same_type_noisy: float = 0.25  # h of a mislabeled demonstration of the right answer type
    same_topic: float = 0.15  # h of a demonstration of another answer type, same scene
    partial: float = 0.3  # share of wrong answers that are a minority human answer

    def __post_init__(self) -> None:
        if not 0.0 <= self.base <= self.peak <= 1.0:
            raise ValueError(f"need 0 <= base <= peak <= 1, got base={self.base} peak={self.peak}")

    def helpfulness(self, example: Mapping[str, Any], meta: Mapping[str, Any]) -> float:
        """How much one demonstration helps the query, in [0, 1]."""
        if example.get("answer_type") is not None and example.get("answer_type") == meta.get(
            "answer_type"
        ):
            return 1.0 if example.get("clean", True) else self.same_type_noisy
        if example.get("topic") is not None and example.get("topic") == meta.get("topic"):
            return self.same_topic
        return 0.0

    def p_correct(self, examples: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> float:
        if not examples:
            return self.base
        h = sum(self.helpfulness(ex, meta) for ex in examples) / len(examples)
        return self.base + (self.peak - self.base) * h

    def answer(
        self, prompt: str, examples: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]
    ) -> str:
        """The simulated model's answer to the query in ``meta`` given these demonstrations."""
        qid = meta.get("query_id", prompt)
        demo_ids = sorted(str(ex.get("demo_id", ex.get("question", ""))) for ex in examples)
        key = (self.seed, meta.get("world_seed", ""), qid, *demo_ids)
        humans = [a for a in meta.get("answers", []) if a]
        truth = meta.get("answer") or _majority(humans) or ""
        if _uniform(*key, "correct") < self.p_correct(examples, meta):
            return _surface_form(truth, _uniform(*key, "form"))
        minority = _minority(humans, truth)
        if minority and _uniform(*key, "wrong") < self.partial:
            return minority
        return str(meta.get("distractor") or "unknown")


def _majority(answers: list[str]) -> str | None:
    counts = Counter(vqa_normalize(a) for a in answers)
    return counts.most_common(1)[0][0] if counts else None


def _minority(answers: list[str], truth: str) -> str | None:
    """The most common human answer that differs from the truth (ties: first seen)."""
    norm_truth = vqa_normalize(truth)
    counts = Counter(n for n in (vqa_normalize(a) for a in answers) if n != norm_truth)
    return counts.most_common(1)[0][0] if counts else None


def _surface_form(answer: str, u: float) -> str:
    if answer.isdigit() and int(answer) < len(_NUMBER_WORDS) and u < 1 / 3:
        return _NUMBER_WORDS[int(answer)]
    if u < 2 / 3:
        return answer.capitalize() + "."
    return answer


class SimulatorVQA(LocalBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sim = self.context.simulator
        if sim is None:
            sim = VQASimulator(**self.spec.options)
        self.simulator = sim

    async def answer(self, reqs: Sequence[VQARequest]) -> list[VQAResult]:
        out = [
            VQAResult(answer=self.simulator.answer(r.prompt, list(r.examples), r.meta))
            for r in reqs
        ]
        self._count(len(out))
        return out
