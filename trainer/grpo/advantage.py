"""GRPO's advantage as training uses it, named here because ddai does not compute it: TRL's
``GRPOTrainer`` does, inside ``_generate_and_score_completions``, and the rollout log keeps what it
computed (``episode.logrows``). Under TRL's defaults, which ``grpo.config`` keeps
(``scale_rewards="group"``, ``multi_objective_aggregation="sum_then_normalize"``), a rollout's
advantage is its reward minus its group's mean reward, over the group's Bessel-corrected std plus
``ADVANTAGE_EPS``; an unscorable rollout (no reward) is left out of the group's mean and std and
gets 0, and so does every rollout of a group with fewer than two rewards (no std).

``group_advantages`` is that formula in plain Python (no torch), the one definition for whatever
recomputes it (the explorer's ``advantage_z``, ``ddai.reports.serve.queries``). The test
``tests/trainer/grpo/test_trainer_pipeline.py`` checks it against the advantages a real TRL run logged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

ADVANTAGE_EPS = 1e-4
"""Added to the group's std before dividing (TRL's ``std_rewards + 1e-4``; verl uses 1e-6)."""


def group_advantages(rewards: Sequence[float | None]) -> list[float]:
    """Each rollout's GRPO advantage in its group, as TRL computes it: ``(r − mean) / (std +
    ADVANTAGE_EPS)`` over the group's rewards that are not None, with the unbiased std; 0 for a
    rollout without a reward and for every rollout of a group with fewer than two rewards."""
    scored = [r for r in rewards if r is not None]
    if len(scored) < 2:
        return [0.0] * len(rewards)
    mean = sum(scored) / len(scored)
    std = math.sqrt(sum((r - mean) ** 2 for r in scored) / (len(scored) - 1))
    return [0.0 if r is None else (r - mean) / (std + ADVANTAGE_EPS) for r in rewards]
