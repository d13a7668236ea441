"""Pointer losses, advantages and rewards against hand-computed values."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

losses = heavy("ddai.trainer.pointer.losses")


def T(data, **kw):
    return torch.tensor(data, **kw)


NAN = float("nan")


def test_shape_rewards_by_hand():
    correct, acc = T([1.0, 0.0, 1.0]), T([1.0, 0.3, 0.6])
    beam, logp = T([2.0, NAN, NAN]), T([-1.0, -3.0, NAN])
    # pm1, no quality: 2c - 1
    assert losses.shape_rewards(correct, acc, beam, logp).tolist() == [1.0, -1.0, 1.0]
    # 01 with beam quality (missing -> 0): 0.2·2 + 1 = 1.4, 0, 1
    r = losses.shape_rewards(correct, acc, beam, logp, correctness_mode="01", quality="beam")
    assert r.tolist() == pytest.approx([1.4, 0.0, 1.0])
    # soft correctness pm1 with logprob quality: 0.5·(-1) + 1, 0.5·(-3) + (0.6 - 1), 0 + 0.2
    r = losses.shape_rewards(
        correct, acc, beam, logp, alpha=0.5, quality="logprob", use_acc_score=True
    )
    assert r.tolist() == pytest.approx([0.5, -1.9, 0.2])
    # clipped to ±clip: 10·2 + 1 = 21 -> 5
    r = losses.shape_rewards(correct, acc, beam, logp, alpha=10.0, quality="beam")
    assert r[0].item() == 5.0
    with pytest.raises(ValueError, match="known: none, beam, logprob"):
        losses.shape_rewards(correct, acc, beam, logp, quality="judge")
    with pytest.raises(ValueError, match="correctness mode"):
        losses.shape_rewards(correct, acc, beam, logp, correctness_mode="pm2")


def test_group_normalization_by_hand():
    r, g = T([1.0, 2.0, 3.0, 5.0, 7.0]), T([0, 0, 0, 9, 4])
    # group 0: mean 2, unbiased std 1 -> -1, 0, 1; one-row groups -> 0
    z = losses.group_normalize(r, g, "zscore")
    assert z.tolist() == pytest.approx([-1.0, 0.0, 1.0, 0.0, 0.0], abs=1e-5)
    m = losses.group_normalize(r, g, "minmax")
    assert m.tolist() == pytest.approx([0.0, 0.5, 1.0, 0.0, 0.0], abs=1e-5)
    assert losses.group_normalize(r, g, "none").tolist() == r.tolist()
    with pytest.raises(ValueError, match="zscore, minmax, none"):
        losses.group_normalize(r, g, "rank")


def test_grpo_advantages_are_group_relative_and_clipped():
    r, g = T([0.0, 0.0, 0.0, 10.0, 1.0, 1.0]), T([0, 0, 0, 0, 1, 1])
    adv = losses.clipped_group_advantages(r, g, norm="zscore", clip=1.0)
    # group 0: mean 2.5, std 5 -> -0.5, -0.5, -0.5, 1.5 -> clipped 1.0; constant group 1 -> 0
    assert adv.tolist() == pytest.approx([-0.5, -0.5, -0.5, 1.0, 0.0, 0.0], abs=1e-5)
    # min-max then minus the group mean: [0, 0, 0, 1] - 0.25
    adv = losses.clipped_group_advantages(r, g, norm="minmax")
    assert adv[:4].tolist() == pytest.approx([-0.25, -0.25, -0.25, 0.75], abs=1e-5)


def test_reinforcepp_advantages_by_hand():
    r, g = T([1.0, 0.0, 1.0, 1.0]), T([0, 0, 1, 1])
    # minus group means: 0.5, -0.5, 0, 0; batch mean 0, unbiased std sqrt(0.5/3)
    s = math.sqrt(0.5 / 3)
    adv = losses.reinforcepp_advantages(r, g)
    assert adv.tolist() == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.0], abs=1e-5)


def test_rce_loss_by_hand():
    logp, r, g = T([-1.0, -2.0, -3.0]), T([1.0, 0.0, 5.0]), T([0, 0, 1])
    loss, m = losses.rce_loss(logp, r, g, temperature=1.0)
    # group 0: w = (e, 1) / (e + 1) -> 0.7311·1 + 0.2689·2 = 1.2689; group 1: w = 1 -> 3
    w = math.e / (math.e + 1)
    assert loss.item() == pytest.approx((w * 1 + (1 - w) * 2 + 3) / 2, abs=1e-6)
    # temperature 2 halves the reward gap: w = e^0.5 / (e^0.5 + 1)
    w2 = math.exp(0.5) / (math.exp(0.5) + 1)
    loss2, _ = losses.rce_loss(logp, r, g, temperature=2.0)
    assert loss2.item() == pytest.approx((w2 + (1 - w2) * 2 + 3) / 2, abs=1e-6)
    assert m["rce/temperature"] == 1.0
    # weights are constants: the gradient is -w_i / G
    lp = logp.clone().requires_grad_(True)
    losses.rce_loss(lp, r, g, temperature=1.0)[0].backward()
    assert lp.grad.tolist() == pytest.approx([-w / 2, -(1 - w) / 2, -0.5], abs=1e-6)


def test_rce_temperature_schedule():
    assert losses.rce_temperature(0, 11) == 2.0
    assert losses.rce_temperature(5, 11) == pytest.approx(1.25)
    assert losses.rce_temperature(10, 11) == pytest.approx(0.5)
    assert losses.rce_temperature(0, 1) == 2.0


def test_clipped_group_loss_by_hand():
    logp = T([math.log(1.5), math.log(0.5), math.log(1.1)], requires_grad=True)
    old, adv = torch.zeros(3), T([1.0, -1.0, 1.0])
    loss, m = losses.clipped_group_loss(logp, old, adv, clip_eps=0.2, kl_coef=0.0)
    # ratios 1.5, 0.5, 1.1: min(1.5, 1.2)·1 = 1.2; min(-0.5, -0.8) = -0.8; 1.1 -> mean 1.5/3
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 1.1) / 3, abs=1e-6)
    assert m["clipped_group/clip_frac"] == pytest.approx(2 / 3)
    loss.backward()
    # clipped rows get no gradient; the unclipped one gets -ratio·A/3
    assert logp.grad.tolist() == pytest.approx([0.0, 0.0, -1.1 / 3], abs=1e-6)
    # k3 KL: mean(r - 1 - log r)
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + (0.1 - math.log(1.1))) / 3
    loss_kl, m = losses.clipped_group_loss(logp.detach(), old, adv, clip_eps=0.2, kl_coef=0.5)
    assert m["clipped_group/kl"] == pytest.approx(kl, abs=1e-6)
    assert loss_kl.item() == pytest.approx(-(1.2 - 0.8 + 1.1) / 3 + 0.5 * kl, abs=1e-6)


def test_reinforcepp_loss_plain_and_clipped():
    logp, adv = T([-1.0, -2.0]), T([2.0, -1.0])
    loss, _ = losses.reinforcepp_loss(logp, adv)
    assert loss.item() == pytest.approx(-(2 * -1 + -1 * -2) / 2)  # = 0
    clipped, _ = losses.reinforcepp_loss(logp, adv, old_logp=logp, clip_eps=0.2)
    assert clipped.item() == pytest.approx(-(2 - 1) / 2)  # ratios 1: -mean(A)


def test_advantages_are_registered_by_name():
    # the config's advantage mode dispatches through this registry (``pointer.train``)
    assert losses.get_advantage("reinforcepp") is losses.reinforcepp_advantages
    assert losses.get_advantage("clipped-group") is losses.clipped_group_advantages
    with pytest.raises(ValueError, match="known: clipped-group, reinforcepp"):
        losses.get_advantage("gae")
