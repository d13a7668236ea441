"""GRPO's advantage as TRL computes it (``ddai.trainer.grpo.advantage``): hand-computed values and
TRL's own nan-aware group statistics on random groups with unscorable rollouts. The check against
a real TRL run's logged advantages is in ``test_trainer_pipeline.py``."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

from ddai.trainer.grpo.advantage import ADVANTAGE_EPS, group_advantages

utils = heavy("trl.trainer.utils")


def test_hand_computed_group():
    # rewards 1, 1, 0, 0: mean 0.5, unbiased std sqrt(1/3)
    z = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert group_advantages([1.0, 1.0, 0.0, 0.0]) == pytest.approx([z, z, -z, -z], rel=1e-12)
    assert ADVANTAGE_EPS == 1e-4


def test_flat_lone_and_unscored_groups_get_zero():
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]
    assert group_advantages([0.7]) == [0.0]
    assert group_advantages([None, 0.7]) == [0.0, 0.0]  # one reward: no std
    assert group_advantages([]) == []
    # an unscorable rollout is out of the statistics: the others are a group of two
    z = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert group_advantages([1.0, None, 0.0]) == pytest.approx([z, 0.0, -z], rel=1e-12)


def _trl(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL 1.16 ``_generate_and_score_completions``, ``scale_rewards="group"``: NaN for an
    unscorable rollout, nan-aware mean and std per contiguous group, NaN advantages to 0."""
    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    std = utils.nanstd(grouped, dim=1).repeat_interleave(num_generations)
    return torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)


def test_matches_trls_group_statistics_on_random_groups():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(7 * 4, generator=g, dtype=torch.float64)
    rewards[torch.rand(28, generator=g) < 0.2] = torch.nan  # unscorable rollouts
    rewards[4:8] = 0.25  # a flat group
    rewards[8:11] = torch.nan  # a group with one reward
    want = _trl(rewards, 4).tolist()
    got = [
        a
        for k in range(7)
        for a in group_advantages(
            [None if math.isnan(r) else r for r in rewards[4 * k : 4 * k + 4].tolist()]
        )
    ]
    # TRL's Bessel factor ``count / (count - 1)`` is a float32 division: agreement to 1e-7
    assert got == pytest.approx(want, rel=1e-7, abs=1e-12)
