"""``ddai curate plan``'s config (its fields are the command's flags)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddai.pipelines.funnel.configs import DEFAULT_N_AGENT, PRIORS, Prior, RunsFlag
from ddai.pipelines.records.success import SUCCESS_THRESHOLD


@dataclass(frozen=True)
class PlanConfig(RunsFlag):
    """Flags of ``ddai curate plan``."""

    logs: Path
    n_agent: list[int] = field(default_factory=lambda: list(DEFAULT_N_AGENT))
    """Proposed rollouts per prompt; repeatable."""
    max_turns: int = 7
    """Turn limit per rollout, DDAI's forced completion included: the policy writes at most
    max_turns − 1 (the bound on its turn budget)."""
    target: float = 0.5
    """Wanted share of GRPO groups with mixed outcomes (learning signal)."""
    prior: Prior = Prior.EMPIRICAL
    """Shrinkage of per-prompt success rates: empirical (Beta fitted per bucket), jeffreys
    (Beta(1/2, 1/2)) or none (plug-in s/m)."""
    success_threshold: float = SUCCESS_THRESHOLD
    price_per_call: float | None = None
    """USD per generator or judge call (default: $DDAI_PRICE_PER_CALL, ddai.toml [plan]
    price_per_call; none set: the cost is shown as unknown, not 0)."""
    buckets: list[Path] = field(default_factory=list)
    """A dataset whose ids form one bucket (named by its file stem); repeatable. Default: buckets
    B / A / 0 by the run's mean NDCG."""
    out: Path | None = None
    """Also write the plan as JSON to this file."""
    mastered: float = 0.7
    floor: float = 0.1

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("name the run whose success rates to plan from with --run RUN")
        bad = [n for n in self.n_agent if n < 1]
        if not self.n_agent or bad:
            raise ValueError(f"--n-agent values must be >= 1, got {list(self.n_agent)}")
        if self.max_turns < 2:
            raise ValueError(
                f"--max-turns must be >= 2 (the forced completion takes the last), got {self.max_turns}"
            )
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"--target must be in (0, 1], got {self.target}")
        if self.prior not in PRIORS:
            raise ValueError(f"--prior {self.prior!r} is not known; use one of {', '.join(PRIORS)}")
        if self.price_per_call is not None and self.price_per_call < 0:
            raise ValueError(f"--price-per-call must be >= 0, got {self.price_per_call}")
