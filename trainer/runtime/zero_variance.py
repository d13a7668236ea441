"""Reward groups without a learning signal: a group whose rollouts all scored the same gives GRPO
(and PPO's group view) nothing to learn from. ``zero_variance`` says it of one group (the
preflight's sampled episodes use it too); ``ZeroVarianceSteps`` counts, during a GRPO or PPO run,
the steps whose groups were all flat and warns about each."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger("ddai.trainer")


def zero_variance(rewards: Sequence[float], tol: float = 1e-12) -> bool:
    """Whether every reward equals the first (within ``tol``): a group GRPO learns nothing from."""
    return all(abs(r - rewards[0]) <= tol for r in rewards)


@dataclass
class ZeroVarianceSteps:
    """Counts training steps whose groups all had zero reward variance, warning about each."""

    steps: dict[int, bool] = field(default_factory=dict)
    """step → whether every group seen in it so far was flat."""
    groups: int = 0
    """Groups seen, all steps."""
    informative: int = 0
    """Groups with reward variance (mixed outcomes: the only ones with a learning signal)."""

    def observe(self, step: int, groups: Sequence[Sequence[float]], span: int = 1) -> bool:
        """Record one batch of ``step``; True when all its groups are flat. ``span``: the optimizer
        steps the batch trains, ``step`` on (GRPO's ``steps_per_generation``, at most the steps
        left in the run): a flat generation leaves each of them without a signal."""
        flat = bool(groups) and all(zero_variance(g) for g in groups)
        self.groups += len(groups)
        self.informative += sum(not zero_variance(g) for g in groups)
        first = step not in self.steps
        for s in range(step, step + max(span, 1)):
            self.steps[s] = flat and self.steps.get(s, True)
        if flat and first:
            log.warning(
                "step %d: all %d groups have zero reward variance (rewards %s): no learning signal",
                step,
                len(groups),
                sorted({round(r, 4) for g in groups for r in g}),
            )
        return flat

    @property
    def count(self) -> int:
        return sum(self.steps.values())

    @property
    def informative_share(self) -> float | None:
        """Share of all groups seen that had reward variance (None before any)."""
        return self.informative / self.groups if self.groups else None
