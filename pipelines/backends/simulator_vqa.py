"""The local VQA model: the synthetic world's deterministic simulator.

Wraps ``ddai.pipelines.backends.vqa_simulator.VQASimulator`` (imported when first built), whose
``answer(prompt, examples, meta)`` reads the latent fields the world puts in the request's ``meta``
and the demonstrations: the same request always gets the same answer, in any order or process.
Pass ``simulator=`` to ``get_backend`` to use a configured instance; otherwise the backend's
options (``seed``, ``base``, ``peak``, ...) build one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddai.pipelines.backends.base import VQARequest, VQAResult
from ddai.pipelines.backends.local import LocalBackend


class SimulatorVQA(LocalBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sim = self.context.simulator
        if sim is None:
            from ddai.pipelines.backends.vqa_simulator import VQASimulator

            sim = VQASimulator(**self.spec.options)
        self.simulator = sim

    async def answer(self, reqs: Sequence[VQARequest]) -> list[VQAResult]:
        out = [
            VQAResult(answer=self.simulator.answer(r.prompt, list(r.examples), r.meta))
            for r in reqs
        ]
        self._count(len(out))
        return out
