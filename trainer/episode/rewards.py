"""The Searcher's reward (seed 000, section 9.4) and streaming scoring (section 5.2).

``reward = gate(format) × (bias + w_judge·judge + w_ndcg·NDCG + w_format·format)``: ``gate`` is 1
when the format check passes (or the gate is off), else 0. Presets:

- ``ddai-phase1``: ``0.1 + 0.9·NDCG`` if the format passes, else 0 (no judge);
- ``judge-only``: the judge score alone (DDAI's focused rounds);
- ``curriculum`` (default): ``0.8·judge + 0.2·NDCG``, gated. DDAI's curriculum run
  (``gspo_phase2_gemini_flash.sh``) had no gate: its ``RM_FORMAT_COEF`` was unset (0, which turns
  the gate off) and its streaming reward could not gate; ``--no-gate`` reproduces it. ddai gates
  by default because the seed (3.3, 9.4.1) names the gate as the guard against format collapse and
  leaves its use open ("plus gating if used").

NDCG is ``ddai.pipelines.records.metrics.ndcg`` (binary relevance, retrieval order, ideal = all golden
pages). The judge grades the frozen generator's answer from the episode's evidence; the answer is
kept beside the rollout, never appended to the trained completion.

Streaming: ``StreamingScorer.submit`` starts the generator and judge calls for a prompt group as
soon as its episodes finish, on a background event loop, while the rest of the batch is still
being generated. ``DdaiReward`` (an async TRL reward function) awaits them with a timeout.

Unscorable is not zero: a rollout whose reward needs a judge score (the judge weighs in and the
format gate let it through) but whose generator or judge call failed or timed out has no reward
(``unscorable_reason``). TRL gets None for it, which it turns into NaN and leaves out of the group
mean and standard deviation, with advantage 0; the rollout log keeps its reward null with the
reason, and the run counts them.

The generator is sent the images an episode gathered (``Episode.images``: pages and crops in
order), at most ``max_images`` of them, the most recent kept (the crops and pages the Searcher
ended on); text generators ignore them.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddai.pipelines.records import metrics
from ddai.pipelines.records.lazy import lazy_module

asyncio = lazy_module("asyncio")  # ~20 ms: the scorer's loop starts only when a run scores


@dataclass(frozen=True)
class RewardSpec:
    """Weights and the gate of the reward."""

    w_judge: float = 0.8
    w_ndcg: float = 0.2
    w_format: float = 0.0
    bias: float = 0.0
    gate: bool = True
    """A format failure scores 0 (and skips the generator and judge calls)."""

    @property
    def needs_judge(self) -> bool:
        return self.w_judge != 0.0


REWARD_PRESETS: dict[str, RewardSpec] = {
    "curriculum": RewardSpec(w_judge=0.8, w_ndcg=0.2, gate=True),
    "ddai-phase1": RewardSpec(w_judge=0.0, w_ndcg=0.9, bias=0.1, gate=True),
    "judge-only": RewardSpec(w_judge=1.0, w_ndcg=0.0, gate=False),
}


def reward_preset(name: str) -> RewardSpec:
    try:
        return REWARD_PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown reward preset {name!r}; known: {', '.join(sorted(REWARD_PRESETS))}"
        ) from None


@dataclass
class Score:
    """One rollout's reward and its parts (``judge`` None when not judged or failed)."""

    reward: float
    judge: float | None
    ndcg: float
    format_ok: bool
    parts: dict[str, float] = field(default_factory=dict)
    unscorable: str | None = None
    """Why the reward could not be computed (then ``reward`` is not trained on); None if scored."""


def compute_reward(
    spec: RewardSpec,
    *,
    format_ok: bool,
    retrieved: Sequence[str],
    golden: Sequence[str],
    judge: float | None,
) -> Score:
    """The scalar reward from its parts; a missing judge score counts as 0."""
    nd = metrics.ndcg(list(retrieved), list(golden))
    fmt = 1.0 if format_ok else 0.0
    j = 0.0 if judge is None else float(judge)
    gate = fmt if spec.gate else 1.0
    raw = spec.bias + spec.w_judge * j + spec.w_ndcg * nd + spec.w_format * fmt
    parts = {"judge": j, "ndcg": nd, "format": fmt, "gate": gate}
    return Score(reward=gate * raw, judge=judge, ndcg=nd, format_ok=format_ok, parts=parts)


def unscorable_reason(spec: RewardSpec, *, format_ok: bool, judged: Judged | None) -> str | None:
    """Why a rollout cannot be scored, or None: the reward needs a judge score (``w_judge`` ≠ 0
    and the format gate, if on, passed) and none came (timeout, generator or judge failure)."""
    if not spec.needs_judge or (spec.gate and not format_ok):
        return None
    if judged is None:
        return "not judged"
    if judged.judge is None:
        return judged.error or "no judge score"
    return None


# ---------------------------------------------------------------------------- streaming


@dataclass
class Judged:
    """What the background scorer learned about one rollout."""

    answer: str | None = None
    judge: float | None = None
    error: str | None = None


def cap_images(images: Sequence[str], limit: int | None) -> list[str]:
    """The last ``limit`` of ``images`` (all when ``limit`` is None; none when it is 0)."""
    if limit is None:
        return list(images)
    return list(images)[-limit:] if limit > 0 else []


class StreamingScorer:
    """Runs generator → judge for finished prompt groups on a background event loop.

    ``submit`` takes a group's evidence and returns a ``concurrent.futures.Future`` of one
    ``Judged`` per rollout, so callers on any thread (the rollout loop, TRL's async reward loop)
    can wait on it. ``close`` stops the loop.
    """

    def __init__(
        self,
        generator: Any,
        judge: Any,
        *,
        max_concurrent_groups: int = 64,
        max_images: int | None = None,
    ) -> None:
        self.generator = generator
        self.judge = judge
        self.max_images = max_images
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ddai-scorer", daemon=True
        )
        self._thread.start()
        self._limit = max_concurrent_groups
        self._sem: asyncio.Semaphore | None = None

    def submit(self, items: Sequence[dict[str, Any]]) -> concurrent.futures.Future:
        """Score a group. Each item: ``question``, ``reference``, ``evidence`` [(page, text)],
        ``images`` (optional: paths or data URLs, in order), ``skip`` (True: not judged, e.g. a
        failed format gate)."""
        return asyncio.run_coroutine_threadsafe(self._score(list(items)), self._loop)

    async def _score(self, items: list[dict[str, Any]]) -> list[Judged]:
        from ddai.pipelines.backends import GenerateRequest, JudgeRequest

        if self._sem is None:
            self._sem = asyncio.Semaphore(self._limit)
        out = [Judged() for _ in items]
        todo = [i for i, it in enumerate(items) if not it.get("skip")]
        if not todo:
            return out
        async with self._sem:
            gen_reqs = [
                GenerateRequest(
                    question=items[i]["question"],
                    pages=[p for p, _ in items[i]["evidence"]],
                    page_texts=[t for _, t in items[i]["evidence"]],
                    images=tuple(cap_images(items[i].get("images", ()), self.max_images)),
                )
                for i in todo
            ]
            answers = await self.generator.generate(gen_reqs)
            judge_idx, judge_reqs = [], []
            for i, res in zip(todo, answers, strict=True):
                out[i].answer = res.answer
                if res.answer is None:
                    out[i].error = f"generator: {res.error}"
                    continue
                judge_idx.append(i)
                judge_reqs.append(
                    JudgeRequest(items[i]["question"], items[i]["reference"] or "", res.answer)
                )
            if judge_reqs:
                for i, res in zip(judge_idx, await self.judge.judge(judge_reqs), strict=True):
                    out[i].judge = res.score
                    if res.score is None:
                        out[i].error = f"judge: {res.error}"
        return out

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
