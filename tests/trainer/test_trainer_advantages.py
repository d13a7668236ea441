"""Advantage estimators: hand-computed values, verl's formulas and loop-vs-vectorised equivalence."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from support.lazy import heavy, torch

utils = heavy("trl.trainer.utils")
A = heavy("ddai.trainer.advantages")

# ---------------------------------------------------------------------------- references


def verl_grpo(scores: torch.Tensor, index: list, eps: float = 1e-6) -> torch.Tensor:
    """verl's compute_grpo_outcome_advantage, per-sample loop (torch.std is Bessel-corrected)."""
    groups = defaultdict(list)
    for i, g in enumerate(index):
        groups[g].append(scores[i])
    stats = {}
    for g, xs in groups.items():
        t = torch.stack(xs)
        stats[g] = (torch.tensor(0.0), torch.tensor(1.0)) if len(xs) == 1 else (t.mean(), t.std())
    out = scores.clone()
    for i, g in enumerate(index):
        mean, std = stats[g]
        out[i] = (scores[i] - mean) / (std + eps)
    return out


def trl_grpo(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL GRPOTrainer's group advantage (scale_rewards="group") for contiguous groups."""
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)
    std = utils.nanstd(grouped, dim=1).repeat_interleave(num_generations)
    return (rewards - mean) / (std + 1e-4)


def verl_gae(rewards, values, mask, gamma, lam):
    """verl's multi-turn GAE loop (compute_gae_advantage_return) without its final whitening."""
    nextvalues, lastgaelam, rev = 0, 0, []
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        rev.append(lastgaelam)
    adv = torch.stack(rev[::-1], dim=1)
    return adv, adv + values


def compressed_gae(rewards, values, mask, gamma, lam):
    """Plain per-row GAE over the policy positions only, scattered back: an independent loop."""
    adv = torch.zeros_like(values)
    for b in range(rewards.shape[0]):
        pos = [t for t in range(rewards.shape[1]) if mask[b, t] > 0]
        nxt_v, nxt_a = 0.0, 0.0
        for t in reversed(pos):
            delta = float(rewards[b, t]) + gamma * nxt_v - float(values[b, t])
            nxt_a = delta + gamma * lam * nxt_a
            nxt_v = float(values[b, t])
            adv[b, t] = nxt_a
    return adv


# ---------------------------------------------------------------------------- GRPO


def test_grpo_hand_computed():
    # Group a = [1, 0, 0]: mean 1/3, unbiased var ((2/3)^2 + 2(1/3)^2)/2 = 1/3, std 0.57735;
    # advantages (2/3)/0.57735 = 1.15470 and (-1/3)/0.57735 = -0.57735. Group b = [0.5] alone
    # keeps its raw reward.
    adv = A.grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.5]), ["a", "a", "a", "b"])
    torch.testing.assert_close(
        adv, torch.tensor([1.154699, -0.577349, -0.577349, 0.5]), atol=1e-5, rtol=0
    )


def test_grpo_population_std():
    # Population std of [1, 0, 0] is sqrt(2/9) = 0.471405: advantages sqrt(2) and -1/sqrt(2).
    adv = A.grpo_advantages(torch.tensor([1.0, 0.0, 0.0]), [7, 7, 7], unbiased=False)
    torch.testing.assert_close(
        adv, torch.tensor([math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)]), atol=1e-5, rtol=0
    )


def test_grpo_constant_group_is_zero_and_centre_only():
    adv = A.grpo_advantages(torch.tensor([0.3, 0.3, 1.0, 0.0]), ["x", "x", "y", "y"])
    assert adv[:2].abs().max() < 1e-6
    # scale="none": r - mean only (Dr. GRPO): [0, 0, 0.5, -0.5]
    centred = A.grpo_advantages(
        torch.tensor([0.3, 0.3, 1.0, 0.0]), ["x", "x", "y", "y"], scale="none"
    )
    torch.testing.assert_close(centred, torch.tensor([0.0, 0.0, 0.5, -0.5]), atol=1e-6, rtol=0)


def test_grpo_matches_verl_on_random_groups():
    g = torch.Generator().manual_seed(0)
    sizes = [1, 2, 3, 5, 8, 1, 4]
    index = [i for i, n in enumerate(sizes) for _ in range(n)]
    perm = torch.randperm(len(index), generator=g).tolist()
    index = [index[p] for p in perm]  # interleaved groups: no reliance on contiguity
    scores = torch.rand(len(index), generator=g, dtype=torch.float64)
    ours = A.grpo_advantages(scores, index)
    ref = verl_grpo(scores, index)
    single = torch.tensor([index.count(i) == 1 for i in index])
    torch.testing.assert_close(ours[~single], ref[~single], atol=1e-12, rtol=0)
    # verl divides a lone rollout's reward by (1 + eps); DESIGN keeps it exactly raw.
    torch.testing.assert_close(ours[single], scores[single], atol=0, rtol=0)
    torch.testing.assert_close(ours[single], ref[single], atol=0, rtol=1e-6)


def test_grpo_matches_trl_with_its_eps():
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(6 * 4, generator=g)
    index = torch.arange(6).repeat_interleave(4)
    torch.testing.assert_close(
        A.grpo_advantages(rewards, index, eps=1e-4), trl_grpo(rewards, 4), atol=1e-6, rtol=1e-6
    )


def test_grpo_batch_scale_uses_global_std():
    r = torch.tensor([1.0, 0.0, 2.0, 1.0], dtype=torch.float64)
    adv = A.grpo_advantages(r, [0, 0, 1, 1], scale="batch", eps=0.0)
    # group means 0.5 and 1.5; global unbiased std of [1, 0, 2, 1] = sqrt(2/3) = 0.816497
    expected = torch.tensor([0.5, -0.5, 0.5, -0.5], dtype=torch.float64) / math.sqrt(2 / 3)
    torch.testing.assert_close(adv, expected, atol=1e-12, rtol=0)


def test_unknown_scale_fails():
    with pytest.raises(ValueError, match="group"):
        A.grpo_advantages(torch.ones(2), [0, 0], scale="rank")


# ---------------------------------------------------------------------------- reward-to-go, REINFORCE++


def test_reward_to_go_keeps_outcome_across_observation_span():
    # mask [1, 0, 1, 1]: position 1 is an observation. γ = 0.5, outcome 1 on the last token:
    # G3 = 1, G2 = 0.5, G0 = 0.5·G2 = 0.25 (the observation neither discounts nor resets), G1 = 0.
    rewards = torch.tensor([[0.0, 9.0, 0.0, 1.0]])  # the 9 sits on a masked position: ignored
    mask = torch.tensor([[1, 0, 1, 1]])
    torch.testing.assert_close(
        A.reward_to_go(rewards, mask, gamma=0.5), torch.tensor([[0.25, 0.0, 0.5, 1.0]])
    )


def test_reinforcepp_hand_computed():
    # returns at policy positions [0.25, 0.5, 1.0]: mean 0.583333, unbiased std 0.381881;
    # whitened: [-0.872872, -0.218218, 1.091089]
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1, 1]])
    adv, ret = A.reinforcepp_advantages(rewards, mask, gamma=0.5)
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.0, 0.5, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(
        adv,
        torch.tensor([[-0.872872, 0.0, -0.218218, 1.091089]], dtype=torch.float64),
        atol=1e-6,
        rtol=0,
    )


def test_reinforce_pp_spelling_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="reinforce_pp_advantages is deprecated") as told:
        old = A.reinforce_pp_advantages
    assert old is A.reinforcepp_advantages
    assert "use reinforcepp_advantages" in str(told[0].message)
    assert "reinforce_pp_advantages" not in A.__all__
    with pytest.raises(AttributeError, match="no attribute 'reinforce_pp_nothing'"):
        A.reinforce_pp_nothing  # noqa: B018


def test_outcome_rewards_on_last_policy_token():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    out = A.outcome_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)
    expected = torch.tensor([[0, 2.0, 0, 0], [0, 0, 3.0, 0], [0, 0, 0, 0]])
    torch.testing.assert_close(out, expected)


# ---------------------------------------------------------------------------- GAE


def test_gae_hand_computed_skips_observation():
    # mask [1, 0, 1, 1], γ = 0.9, λ = 0.8, V = [0.5, -, 0.2, 0.4], r = [0, -, 0, 1]
    # t=3: δ = 1 - 0.4 = 0.6, A = 0.6
    # t=2: δ = 0.9·0.4 - 0.2 = 0.16, A = 0.16 + 0.72·0.6 = 0.592
    # t=0 bootstraps from t=2: δ = 0.9·0.2 - 0.5 = -0.32, A = -0.32 + 0.72·0.592 = 0.10624
    rewards = torch.tensor([[0.0, 5.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 9.0, 0.2, 0.4]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1, 1]])
    adv, ret = A.gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(
        adv, torch.tensor([[0.10624, 0.0, 0.592, 0.6]], dtype=torch.float64), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(
        ret, torch.tensor([[0.60624, 0.0, 0.792, 1.0]], dtype=torch.float64), atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_verl_and_a_plain_loop(seed):
    g = torch.Generator().manual_seed(seed)
    B, T = 5, 17
    rewards = torch.randn(B, T, generator=g, dtype=torch.float64)
    values = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.35).long()
    mask[0] = 0  # a row with no policy token
    adv, ret = A.gae(rewards, values, mask, gamma=0.97, lam=0.9)
    v_adv, v_ret = verl_gae(rewards, values, mask.double(), 0.97, 0.9)
    on = mask.bool()
    torch.testing.assert_close(adv[on], v_adv[on], atol=1e-12, rtol=0)
    torch.testing.assert_close(ret[on], v_ret[on], atol=1e-12, rtol=0)
    torch.testing.assert_close(
        adv, compressed_gae(rewards, values, mask, 0.97, 0.9), atol=1e-12, rtol=0
    )
    assert (adv[~on] == 0).all() and (ret[~on] == 0).all()


def test_masked_whiten_ignores_masked_entries():
    x = torch.tensor([[1.0, 100.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1]])
    # mean 2, unbiased var ((1)^2 + (1)^2)/1 = 2: whitened [-1/sqrt2, ., 1/sqrt2]
    w = A.masked_whiten(x, mask)
    torch.testing.assert_close(
        w[0, [0, 2]], torch.tensor([-1, 1], dtype=torch.float64) / math.sqrt(2)
    )
