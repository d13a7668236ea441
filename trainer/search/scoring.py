"""The GRPO/PPO reward over streamed judge scores: ``DdaiReward`` awaits each group's generator and
judge results, then scores every episode with ``compute_reward``. The rollout it scores
(``search.episodes.SearchRollout``) owns the per-episode store it reads and fills.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ddai.trainer.search.rewards import Judged, compute_reward, unscorable_reason


class DdaiReward:
    """Async TRL reward function: awaits each group's streamed judge result (with a timeout),
    then computes ``compute_reward``. A rollout that needed a judge score and got none (timeout,
    failure) is unscorable: None, which TRL leaves out of group normalization (advantage 0).
    Logs ``ddai/judge``, ``ddai/ndcg``, ``ddai/format_ok``, ``ddai/judge_coverage`` (share of
    rollouts needing a judge score that got one in time) and ``ddai/unscorable`` (their count)."""

    __name__ = "ddai_reward"

    def __init__(self, rollout: Any, timeout: float) -> None:
        self.rollout = rollout
        self.timeout = timeout

    async def __call__(self, prompts, completions, episode_key, log_metric=None, **kwargs):
        ro = self.rollout
        trajs = [ro.pending[k] for k in episode_key]
        futs = {id(f): f for k in episode_key if (f := ro.futures.get(k, (None, 0))[0]) is not None}
        if futs:
            waiters = [asyncio.wrap_future(f) for f in futs.values()]
            _, late = await asyncio.wait(waiters, timeout=self.timeout)
            for w in late:
                w.cancel()
        needed = scored = 0
        rewards = []
        for t in trajs:
            judged = None
            if t.key in ro.futures:
                fut, i = ro.futures[t.key]
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    judged = fut.result()[i]
                else:
                    judged = Judged(
                        error="timeout"
                        if not fut.done() or fut.cancelled()
                        else str(fut.exception())
                    )
                if not (ro.spec.gate and not t.episode.format_ok):
                    needed += 1
                    scored += judged.judge is not None
            score = compute_reward(
                ro.spec,
                format_ok=t.episode.format_ok,
                retrieved=t.episode.retrieved,
                golden=t.task.reference_pages,
                judge=judged.judge if judged else None,
            )
            score.unscorable = unscorable_reason(
                ro.spec, format_ok=t.episode.format_ok, judged=judged
            )
            if judged is not None:
                ro.judged[t.key] = judged
            ro.scores[t.key] = score
            rewards.append(None if score.unscorable else score.reward)
        if log_metric is not None and trajs:
            n = len(trajs)
            log_metric("ddai/ndcg", sum(ro.scores[t.key].ndcg for t in trajs) / n)
            log_metric("ddai/format_ok", sum(t.episode.format_ok for t in trajs) / n)
            log_metric("ddai/num_turns", sum(len(t.episode.turns) for t in trajs) / n)
            if needed:
                log_metric("ddai/judge_coverage", scored / needed)
                log_metric("ddai/unscorable", float(needed - scored))
                log_metric("ddai/judge", sum(ro.scores[t.key].parts["judge"] for t in trajs) / n)
        return rewards
