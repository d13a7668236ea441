"""Did training beat its control? The gain over an lr-0 control with its standard error.

Each seed runs a trained arm and a control (the same SFT start, the same sampling, learning rate 0)
for the same number of rollout batches. Per seed, the gain is the trained arm's mean reward over
the last ``tail`` share of its rollout batches minus the control's over the same batches; across
seeds the gain is their mean, with standard error ``sd / sqrt(seeds)`` (sample sd, ``ddof = 1``).
A gain above ``z`` standard errors is called learning; with one seed there is no error estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Gain:
    per_seed: tuple[float, ...]
    mean: float
    se: float | None
    """None with fewer than two seeds."""

    def above(self, z: float = 3.0) -> bool:
        """Whether the gain exceeds ``z`` standard errors (False without an error estimate)."""
        return self.se is not None and self.mean > z * self.se


def tail_mean(curve: Sequence[float], tail: float = 0.2) -> float:
    """Mean of the last ``ceil(tail · len)`` values (at least one) of a per-batch reward curve."""
    if not curve:
        raise ValueError("empty reward curve")
    if not 0 < tail <= 1:
        raise ValueError(f"tail {tail} must be in (0, 1]")
    k = max(1, math.ceil(tail * len(curve)))
    return sum(curve[-k:]) / k


def gain_over_control(
    trained: Mapping[int, Sequence[float]],
    control: Mapping[int, Sequence[float]],
    *,
    tail: float = 0.2,
) -> Gain:
    """Mean over seeds of ``tail_mean(trained[s]) − tail_mean(control[s])`` and its standard error.

    ``trained`` and ``control``: seed → mean reward per rollout batch, in order, same length.
    """
    seeds = sorted(trained)
    if not seeds or sorted(control) != seeds:
        raise ValueError(
            f"trained seeds {seeds} and control seeds {sorted(control)} must match and be non-empty"
        )
    diffs = []
    for s in seeds:
        if len(trained[s]) != len(control[s]):
            raise ValueError(
                f"seed {s}: {len(trained[s])} trained batches against {len(control[s])} control"
            )
        diffs.append(tail_mean(trained[s], tail) - tail_mean(control[s], tail))
    n = len(diffs)
    mean = sum(diffs) / n
    se = None
    if n > 1:
        var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
        se = math.sqrt(var / n)
    return Gain(per_seed=tuple(diffs), mean=mean, se=se)
