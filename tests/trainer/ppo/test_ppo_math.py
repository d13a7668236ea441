"""PPO's math as ``ddai train ppo`` uses it, against hand-computed values: GAE (λ = 0, λ = 1,
across an observation span, loop vs a vectorized closed form), the clipped surrogate on both
sides, KL-penalized per-token rewards and the clipped value loss."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

advantages = heavy("ddai.trainer.advantages")
losses = heavy("ddai.trainer.losses")
value_losses = heavy("ddai.trainer.value.losses")


def T(x, dtype=None):
    return torch.tensor(x, dtype=torch.float64 if dtype is None else dtype)


def test_gae_lambda_zero_is_one_step_td():
    rewards = T([[0.0, 0.0, 1.0]])
    values = T([[0.5, 0.6, 0.7]])
    adv, ret = advantages.gae(rewards, values, torch.ones(1, 3), 0.9, 0.0)
    # δ_2 = 1 - 0.7 = 0.3; δ_1 = 0.9·0.7 - 0.6 = 0.03; δ_0 = 0.9·0.6 - 0.5 = 0.04
    assert torch.allclose(adv, T([[0.04, 0.03, 0.3]]))
    assert torch.allclose(ret, T([[0.54, 0.63, 1.0]]))


def test_gae_lambda_one_is_monte_carlo_return_minus_value():
    rewards = T([[-0.1, 0.2, 1.0]])  # KL penalties on every token, the outcome on the last
    values = T([[0.5, 0.6, 0.7]])
    adv, ret = advantages.gae(rewards, values, torch.ones(1, 3), 1.0, 1.0)
    # G = [-0.1 + 0.2 + 1, 0.2 + 1, 1] = [1.1, 1.2, 1.0]; A = G - V = [0.6, 0.6, 0.3]
    assert torch.allclose(ret, T([[1.1, 1.2, 1.0]]))
    assert torch.allclose(adv, T([[0.6, 0.6, 0.3]]))


def test_gae_skips_an_observation_span_instead_of_ending_the_episode():
    mask = T([[1, 1, 0, 0, 1]])
    values = T([[0.5, 0.4, 9.0, 9.0, 0.8]])  # observation values are never read
    rewards = T([[0.0, 0.0, 7.0, 7.0, 1.0]])  # nor observation rewards
    adv, ret = advantages.gae(rewards, values, mask, 0.9, 0.8)
    # t=4: δ = 1 - 0.8 = 0.2, A = 0.2
    # t=1: δ = 0.9·0.8 - 0.4 = 0.32 (bootstraps from t=4), A = 0.32 + 0.72·0.2 = 0.464
    # t=0: δ = 0.9·0.4 - 0.5 = -0.14, A = -0.14 + 0.72·0.464 = 0.19408
    assert torch.allclose(adv, T([[0.19408, 0.464, 0.0, 0.0, 0.2]]))
    assert torch.allclose(ret, T([[0.69408, 0.864, 0.0, 0.0, 1.0]]))
    # The same as GAE over the policy tokens alone: the span is skipped, not an episode end.
    compact, _ = advantages.gae(
        T([[0.0, 0.0, 1.0]]), T([[0.5, 0.4, 0.8]]), torch.ones(1, 3), 0.9, 0.8
    )
    assert torch.allclose(adv[mask.bool()], compact[0])


def vectorized_gae(rewards, values, mask, gamma, lam):
    """Closed form per row: A_i = Σ_j≥i (γλ)^(j-i) δ_j over the policy tokens, δ from a shifted
    value vector; one triangular matrix product instead of a backward loop."""
    adv = torch.zeros_like(values)
    for b in range(rewards.shape[0]):
        pos = mask[b].bool().nonzero().squeeze(-1)
        r, v = rewards[b, pos], values[b, pos]
        nxt = torch.cat([v[1:], v.new_zeros(1)])
        delta = r + gamma * nxt - v  # [n]
        k = torch.arange(len(pos), dtype=torch.float64)
        expo = k[None, :] - k[:, None]  # [n, n]: j - i
        disc = torch.where(expo >= 0, (gamma * lam) ** expo.clamp(min=0), torch.zeros_like(expo))
        adv[b, pos] = disc @ delta
    return adv, (adv + values) * mask


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gae_loop_equals_vectorized_closed_form(seed):
    g = torch.Generator().manual_seed(seed)
    B, L = 5, 17
    rewards = torch.randn(B, L, generator=g, dtype=torch.float64)
    values = torch.randn(B, L, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, L, generator=g) < 0.7).to(torch.float64)
    mask[:, 0] = 1
    gamma, lam = 0.97, 0.9
    adv, ret = advantages.gae(rewards, values, mask, gamma, lam)
    want_adv, want_ret = vectorized_gae(rewards, values, mask, gamma, lam)
    assert torch.allclose(adv, want_adv, atol=1e-12)
    assert torch.allclose(ret, want_ret, atol=1e-12)


def test_ppo_clipping_on_both_sides():
    # ratios 1.5, 0.5, 1.1, 0.5 with advantages +1, -1, +2, +1; ε = 0.2
    ratio = T([[1.5, 0.5, 1.1, 0.5]])
    old = torch.zeros(1, 4, dtype=torch.float64)
    logp = ratio.log().clone().requires_grad_(True)
    adv = T([[1.0, -1.0, 2.0, 1.0]])
    loss, metrics = losses.ppo_loss(logp, old, adv, torch.ones(1, 4), eps_low=0.2, eps_high=0.2)
    # token 0: max(-1.5, -1.2) = -1.2 (clipped above); token 1: max(0.5, 0.8) = 0.8 (clipped below)
    # token 2: max(-2.2, -2.2) = -2.2;                   token 3: max(-0.5, -0.8) = -0.5 (unclipped)
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 2.2 - 0.5) / 4)
    loss.backward()
    # Clipped tokens get no gradient; the others -A·r / 4.
    assert torch.allclose(logp.grad, T([[0.0, 0.0, -2.2 / 4, -0.5 / 4]]))
    assert metrics["actor/clip_frac_high"] == pytest.approx(0.25)
    assert metrics["actor/clip_frac_low"] == pytest.approx(0.25)


def test_kl_penalized_rewards_hand_computed():
    scores = T([1.0, 0.5])
    logp = T([[-1.0, -2.0, -0.5, 0.0], [-0.2, -3.0, -0.7, 0.0]])
    ref = T([[-1.5, -1.0, -0.5, 0.0], [-0.4, -1.0, -0.2, 0.0]])
    mask = T([[1, 1, 0, 0], [1, 0, 1, 0]])  # row 1: an observation token between two policy tokens
    rewards, kl = value_losses.kl_penalized_rewards(scores, logp, ref, mask, beta=0.1, kind="k1")
    # k1 = logp - ref: row 0 [0.5, -1.0], row 1 [0.2, ·, -0.5]; r = -0.1·k1, outcome on last policy token
    assert torch.allclose(kl, T([[0.5, -1.0, 0.0, 0.0], [0.2, 0.0, -0.5, 0.0]]))
    assert torch.allclose(rewards, T([[-0.05, 1.1, 0.0, 0.0], [-0.02, 0.0, 0.55, 0.0]]))
    _, kl3 = value_losses.kl_penalized_rewards(scores, logp, ref, mask, beta=0.1, kind="k3")
    # k3 at row 0, token 0: d = ref - logp = -0.5 -> e^-0.5 + 0.5 - 1 = 0.1065306597
    assert kl3[0, 0].item() == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-12)
    assert kl3[0, 2].item() == 0.0 and kl3[1, 1].item() == 0.0
    no_kl, _ = value_losses.kl_penalized_rewards(scores, logp, ref, mask, beta=0.0)
    assert torch.allclose(no_kl, T([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0]]))


def test_clipped_value_loss_hand_computed():
    values = T([[1.0, 0.0, 0.6, 5.0]]).requires_grad_(True)
    old = T([[0.5, 0.5, 0.5, 0.0]])
    returns = T([[1.0, 0.0, 1.0, 0.0]])
    mask = T([[1, 1, 1, 0]])
    loss, metrics = value_losses.clipped_value_loss(values, old, returns, mask, clip=0.2)
    # t0: (1-1)^2 = 0 vs clipped 0.7: 0.09; t1: 0 vs clipped 0.3: 0.09; t2: 0.16 both
    # 0.5 · (0.09 + 0.09 + 0.16) / 3 = 0.0566667
    assert loss.item() == pytest.approx(0.5 * 0.34 / 3)
    assert metrics["critic/vf_clipfrac"] == pytest.approx(2 / 3)
    loss.backward()
    # Where the clipped term wins, the clamp blocks the gradient; t2: 0.5·2·(0.6-1)/3.
    assert torch.allclose(values.grad, T([[0.0, 0.0, -0.4 / 3, 0.0]]))
    plain, m2 = value_losses.clipped_value_loss(values, old, returns, mask, clip=None)
    assert plain.item() == pytest.approx(0.5 * 0.16 / 3)
    assert m2["critic/vf_clipfrac"] == 0.0
    with pytest.raises(ValueError, match="value clip"):
        value_losses.clipped_value_loss(values, old, returns, mask, clip=0.0)
