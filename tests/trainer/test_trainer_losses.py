"""Losses: hand-computed values, verl's formulas on random inputs, and masking of observations."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

L = heavy("ddai.trainer.losses")

# ---------------------------------------------------------------------------- references (verl)


def verl_agg(loss_mat, mask, mode):
    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum()
    if mode == "seq-mean-token-sum":
        return (loss_mat * mask).sum(-1).mean()
    return ((loss_mat * mask).sum(-1) / mask.sum(-1)).mean()


def verl_gspo(old_log_prob, log_prob, advantages, mask, clip_low, clip_high):
    """verl's compute_policy_loss_gspo: token-level sg[s_i]·π/sg[π] ratio, seq-mean-token-mean."""
    neg_kl = log_prob - old_log_prob
    seq_len = mask.sum(-1).clamp(min=1)
    neg_kl_seq = (neg_kl * mask).sum(-1) / seq_len
    log_ratio = log_prob - log_prob.detach() + neg_kl_seq.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(log_ratio, max=10.0))
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return verl_agg(torch.maximum(l1, l2), mask, "seq-mean-token-mean")


def verl_ppo(old_log_prob, log_prob, advantages, mask, clip_low, clip_high, clip_ratio_c, mode):
    """verl's compute_policy_loss (asymmetric + dual clip)."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    c1 = torch.maximum(l1, l2)
    c2 = torch.min(-advantages * clip_ratio_c, c1)
    return verl_agg(torch.where(advantages < 0, c2, c1), mask, mode)


def _random_batch(seed, B=6, T=11, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    old = logp.detach() + scale * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.3).double()
    mask[:, 0] = 1.0
    return logp, old, adv, mask


# ---------------------------------------------------------------------------- aggregation and KL


def test_aggregation_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert L.aggregate(loss, mask, "token-mean").item() == pytest.approx(7 / 3)  # (1+2+4)/3
    assert L.aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)  # (1.5+4)/2
    assert L.aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)  # (3+4)/2
    with pytest.raises(ValueError, match="seq-mean-token-mean, seq-mean-token-sum, token-mean"):
        L.aggregate(loss, mask, "sum")


def test_kl_estimators_hand_computed():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert L.kl_k1(logp, ref).item() == pytest.approx(1.0)
    # k3: d = ref - logp = -1; e^-1 - (-1) - 1 = 0.367879
    assert L.kl_k3(logp, ref).item() == pytest.approx(math.exp(-1), abs=1e-7)
    assert L.kl_penalty(logp, logp, "k3").item() == 0.0
    # k2 = ½·(−1 − (−2))² = 0.5
    assert L.kl_k2(logp, ref).item() == pytest.approx(0.5)
    assert L.kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        L.kl_penalty(logp, ref, "k9")


# ---------------------------------------------------------------------------- GSPO


def test_gspo_hand_computed():
    # row 0: log-ratios [0.1, 0.3, (masked 5.0)] -> mean 0.2, s = e^0.2 = 1.221403 inside
    #        [0.8, 1.28]; A = 1 -> loss -1.221403
    # row 1: log-ratios -0.5 everywhere -> s = e^-0.5 = 0.606531; A = -2:
    #        -min(0.606531·-2, 0.8·-2) = 1.6
    # seq-mean: (-1.221403 + 1.6) / 2 = 0.189299
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.1, 0.3, 5.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, metrics = L.gspo_loss(
        logp, old, torch.tensor([1.0, -2.0]), mask, eps_low=0.2, eps_high=0.28
    )
    assert loss.item() == pytest.approx((-math.exp(0.2) + 1.6) / 2, abs=1e-6)
    assert metrics["actor/clip_frac_low"] == pytest.approx(3 / 5)  # row 1's 3 tokens of 5
    assert metrics["actor/clip_frac_high"] == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("eps", [(0.2, 0.28), (3e-4, 4e-4)])
def test_gspo_matches_verl_value_and_gradient(seed, eps):
    logp, old, adv, mask = _random_batch(seed)
    loss, _ = L.gspo_loss(logp, old, adv, mask, eps_low=eps[0], eps_high=eps[1])
    (g_ours,) = torch.autograd.grad(loss, logp)
    ref = verl_gspo(old, logp, adv.unsqueeze(-1), mask, *eps)
    (g_ref,) = torch.autograd.grad(ref, logp)
    torch.testing.assert_close(loss, ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(g_ours, g_ref, atol=1e-12, rtol=1e-10)


def test_gspo_ignores_observation_tokens():
    logp, old, adv, mask = _random_batch(7, scale=0.05)
    loss, _ = L.gspo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    (grad,) = torch.autograd.grad(loss, logp)
    assert (grad[mask == 0] == 0).all()
    assert (grad[mask == 1] != 0).any()
    # Perturb both log-prob tensors on observation positions only: same loss, same gradient.
    noise = torch.randn(logp.shape, dtype=logp.dtype) * (1 - mask)
    logp2 = (logp.detach() + 3 * noise).requires_grad_(True)
    loss2, _ = L.gspo_loss(logp2, old - 2 * noise, adv, mask, eps_low=0.2, eps_high=0.28)
    (grad2,) = torch.autograd.grad(loss2, logp2)
    torch.testing.assert_close(loss2, loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad2, grad, atol=1e-12, rtol=0)


# ---------------------------------------------------------------------------- PPO


def test_ppo_hand_computed_with_dual_clip():
    # t0: r = e^0.5 = 1.6487, A = 1 -> max(-1.6487, -1.3) = -1.3
    # t1: r = e^-1 = 0.3679, A = -1 -> max(0.3679, 0.8) = 0.8
    # t2: r = e^2 = 7.389, A = -1 -> max(7.389, 1.2) = 7.389, dual clip c = 3 -> 3
    logp = torch.tensor([[0.5, -1.0, 2.0]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    mask = torch.ones(1, 3)
    plain, m_plain = L.ppo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.3)
    dual, m_dual = L.ppo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.3, dual_clip=3.0)
    assert plain.item() == pytest.approx((-1.3 + 0.8 + math.exp(2)) / 3, abs=1e-6)
    assert dual.item() == pytest.approx((-1.3 + 0.8 + 3.0) / 3, abs=1e-6)
    assert m_dual["actor/clip_frac_dual"] == pytest.approx(1 / 3)
    assert m_plain["actor/clip_frac"] == pytest.approx(2 / 3)  # t0 and t1 take the clipped branch
    with pytest.raises(ValueError, match="dual_clip"):
        L.ppo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.3, dual_clip=0.5)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_ppo_matches_verl(seed, mode):
    logp, old, _, mask = _random_batch(seed, scale=1.0)
    adv = torch.randn(logp.shape, dtype=logp.dtype, generator=torch.Generator().manual_seed(seed))
    loss, _ = L.ppo_loss(
        logp, old, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=3.0, loss_agg_mode=mode
    )
    ref = verl_ppo(old, logp, adv, mask, 0.2, 0.28, 3.0, mode)
    torch.testing.assert_close(loss, ref, atol=1e-12, rtol=1e-12)
    (g1,) = torch.autograd.grad(loss, logp)
    (g2,) = torch.autograd.grad(verl_ppo(old, logp, adv, mask, 0.2, 0.28, 3.0, mode), logp)
    torch.testing.assert_close(g1, g2, atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------------------- RCE


def test_rce_hand_computed():
    # one group, rewards [1, 0], τ = 1: weights 2·softmax = [1.462117, 0.537883];
    # per-row NLL token means [1, 2] -> (1.462117·1 + 0.537883·2) / 2 = 1.268941
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    loss, m = L.rce_loss(logp, torch.tensor([1.0, 0.0]), torch.ones(2, 2))
    assert loss.item() == pytest.approx(1.2689414, abs=1e-6)
    assert m["actor/rce_weight_max"] == pytest.approx(1.4621172, abs=1e-6)


def test_rce_high_temperature_is_sft_and_groups_are_separate():
    logp = torch.randn(4, 3)
    mask = torch.ones(4, 3)
    sft = L.aggregate(-logp, mask, "seq-mean-token-mean")
    hot, _ = L.rce_loss(logp, torch.tensor([5.0, 0.0, 1.0, 3.0]), mask, temperature=1e6)
    torch.testing.assert_close(hot, sft, atol=1e-4, rtol=0)
    # Two groups of one rollout each: every weight is 1 whatever the rewards.
    single, _ = L.rce_loss(logp[:2], torch.tensor([9.0, -9.0]), mask[:2], group_ids=["a", "b"])
    torch.testing.assert_close(single, L.aggregate(-logp[:2], mask[:2], "seq-mean-token-mean"))


def test_ratio_spread_by_hand():
    """Row 0: policy log-ratios 0.1 and 0.3 (an observation token's 5.0 masked out), sequence
    ratio exp(0.2); row 1: log-ratio -0.4 alone, exp(-0.4); row 2: no policy token."""
    logp = torch.tensor([[0.1, 5.0, 0.3], [-0.4, 0.0, 0.0], [9.0, 9.0, 9.0]])
    old = torch.zeros(3, 3)
    mask = torch.tensor([[1, 0, 1], [1, 0, 0], [0, 0, 0]])
    seq = L.ratio_spread(logp, old, mask, "sequence")
    assert seq == pytest.approx(max(math.exp(0.2) - 1, 1 - math.exp(-0.4)), abs=1e-6)
    tok = L.ratio_spread(logp, old, mask, "token")
    assert tok == pytest.approx(math.exp(0.3) - 1, abs=1e-6)
    assert L.ratio_spread(logp, logp, mask) == 0.0
    assert L.ratio_spread(logp, old, torch.zeros(3, 3)) == 0.0
    with pytest.raises(ValueError, match="token or sequence"):
        L.ratio_spread(logp, old, mask, "row")
