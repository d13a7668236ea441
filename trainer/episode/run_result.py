"""``LoggedRunResult``: what a training run's result reports of its rollout log, the base of the
GRPO and PPO results; apart from ``logrows`` (which re-exports it) so that the run configs, and
the commands' ``--help`` that read them, do not import the rollout machinery."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class LoggedRunResult:
    """What a training run's result reports of its rollout log (``RolloutLog.result_fields``);
    ``GRPOResult`` and ``PPOResult`` add their own fields."""

    run_id: str
    logs: str
    rollouts_logged: int
    """Rows the run committed (the main process's count: it alone writes); a PPO run resumed
    from step N counts the rows of steps 1..N kept in the log too (the run's total)."""
    reward_first: float | None
    """Mean reward of the first logged step."""
    reward_last: float | None
    """Mean reward of the last logged step."""
