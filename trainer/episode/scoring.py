"""The scoring of Searcher episodes, with one owner: ``ScoreStore`` keeps every episode from its
rollout to its log row (the trajectory, its streamed judge call, its score), and ``DdaiReward`` is
the TRL reward function over it.

GRPO (through TRL), PPO and ``ddai collect`` (through ``episode.episodes.Episodes``) and the
preflight go through the store's methods only: ``keep`` and ``submit`` while the episodes run,
``score`` to await the judge and compute the rewards, ``pop`` to take an episode out for its log
row (``score_of`` reads a score without taking it).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from ddai.pipelines.records.lazy import lazy_module
from ddai.trainer.episode.rewards import (
    Judged,
    RewardSpec,
    Score,
    StreamingScorer,
    compute_reward,
    unscorable_reason,
)

asyncio = lazy_module("asyncio")


class ScoreStore:
    """Episodes by key between their rollout and their log row, with their judge calls and
    scores. ``scorer`` None (or a reward without the judge): no judge calls are made."""

    def __init__(self, spec: RewardSpec, scorer: StreamingScorer | None = None) -> None:
        self.spec = spec
        self.scorer = scorer
        self._episodes: dict[str, Any] = {}
        # key -> (the group's judge future, the episode's index in the group)
        self._judging: dict[str, tuple[concurrent.futures.Future, int]] = {}
        self._judged: dict[str, Judged] = {}
        self._scores: dict[str, Score] = {}

    def __len__(self) -> int:
        return len(self._episodes)

    def keep(self, trajs: list[Any]) -> None:
        """Hold rolled-out episodes (``Trajectory``s) until they are popped."""
        for t in trajs:
            self._episodes[t.key] = t

    def submit(self, group: list[Any]) -> None:
        """Send a finished group's episodes to the generator and judge (``on_group_done``); a
        format failure under a gated reward is sent as ``skip`` (it scores 0 without a judge)."""
        if self.scorer is None or not self.spec.needs_judge:
            return
        items = [
            {
                "question": t.task.question,
                "reference": t.task.reference_answer,
                "evidence": t.episode.evidence,
                "images": t.episode.images,
                "skip": self.spec.gate and not t.episode.format_ok,
            }
            for t in group
        ]
        fut = self.scorer.submit(items)
        for i, t in enumerate(group):
            self._judging[t.key] = (fut, i)

    def _judged_of(self, key: str) -> Judged | None:
        """The finished judge result of ``key`` (an error for a late or failed call); None when
        it was never sent to the judge."""
        if key not in self._judging:
            return None
        fut, i = self._judging[key]
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            return fut.result()[i]
        return Judged(
            error="timeout" if not fut.done() or fut.cancelled() else str(fut.exception())
        )

    async def score(
        self, keys: list[str], timeout: float
    ) -> tuple[list[float | None], dict[str, float]]:
        """Await the judge calls of ``keys`` (at most ``timeout`` seconds), score each episode and
        keep the scores; ``(rewards, ddai/... metrics)``. A rollout that needed a judge score and
        got none (timeout, failure) is unscorable: its reward is None."""
        trajs = [self._episodes[k] for k in keys]
        futs = {id(f): f for k in keys if (f := self._judging.get(k, (None, 0))[0]) is not None}
        if futs:
            waiters = [asyncio.wrap_future(f) for f in futs.values()]
            _, late = await asyncio.wait(waiters, timeout=timeout)
            for w in late:
                w.cancel()
        needed = scored = 0
        rewards: list[float | None] = []
        for t in trajs:
            judged = self._judged_of(t.key)
            if judged is not None:
                self._judged[t.key] = judged
                if not (self.spec.gate and not t.episode.format_ok):
                    needed += 1
                    scored += judged.judge is not None
            score = compute_reward(
                self.spec,
                format_ok=t.episode.format_ok,
                retrieved=t.episode.retrieved,
                golden=t.task.reference_pages,
                judge=judged.judge if judged else None,
            )
            score.unscorable = unscorable_reason(
                self.spec, format_ok=t.episode.format_ok, judged=judged
            )
            self._scores[t.key] = score
            rewards.append(None if score.unscorable else score.reward)
        return rewards, self._metrics(trajs, needed, scored)

    def _metrics(self, trajs: list[Any], needed: int, scored: int) -> dict[str, float]:
        if not trajs:
            return {}
        n = len(trajs)
        out = {
            "ddai/ndcg": sum(self._scores[t.key].ndcg for t in trajs) / n,
            "ddai/format_ok": sum(t.episode.format_ok for t in trajs) / n,
            "ddai/num_turns": sum(len(t.episode.turns) for t in trajs) / n,
        }
        if needed:
            out["ddai/judge_coverage"] = scored / needed
            out["ddai/unscorable"] = float(needed - scored)
            out["ddai/judge"] = sum(self._scores[t.key].parts["judge"] for t in trajs) / n
        return out

    def score_of(self, key: str) -> Score | None:
        """The score of a kept episode (None before ``score``)."""
        return self._scores.get(key)

    def group_rewards(self, keys: list[str]) -> dict[int, list[float]]:
        """The scored rewards of ``keys`` by group (unscorable and unscored ones left out), for
        the zero-variance count."""
        groups: dict[int, list[float]] = {}
        for k in keys:
            score = self._scores.get(k)
            if score is not None and not score.unscorable:
                groups.setdefault(self._episodes[k].group, []).append(score.reward)
        return groups

    def pop(self, key: str) -> tuple[Any, Judged | None, Score | None]:
        """Take an episode out: ``(trajectory, judge result or None, score or None)``."""
        self._judging.pop(key, None)
        return self._episodes.pop(key), self._judged.pop(key, None), self._scores.pop(key, None)


class DdaiReward:
    """Async TRL reward function over a ``ScoreStore``: awaits each group's streamed judge result
    (with a timeout), then computes ``compute_reward``. An unscorable rollout's None is left out
    of TRL's group normalization (advantage 0). Logs ``ddai/judge``, ``ddai/ndcg``,
    ``ddai/format_ok``, ``ddai/judge_coverage`` (share of rollouts needing a judge score that got
    one in time) and ``ddai/unscorable`` (their count)."""

    __name__ = "ddai_reward"

    def __init__(self, store: ScoreStore, timeout: float) -> None:
        self.store = store
        self.timeout = timeout

    async def __call__(self, prompts, completions, episode_key, log_metric=None, **kwargs):
        rewards, metrics = await self.store.score(list(episode_key), self.timeout)
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(name, value)
        return rewards
