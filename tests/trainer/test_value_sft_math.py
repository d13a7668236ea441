"""Seed 004's TD weights and weighted CE against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from ddai.trainer.value import sft_math as vsm

SEED = vsm.TDWeightConfig()  # β 1, clip [0.1, 2], γ 1, λ 1


def two_samples():
    """Row 0 correct (R=1), row 1 wrong (R=0); mask 0 = prompt/observation/padding tokens."""
    values = torch.tensor([[0.9, 0.5, 5.0, -0.5], [0.3, 0.6, 0.1, 9.0]])
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]])
    rewards = torch.tensor([1.0, 0.0])
    correct = torch.tensor([True, False])
    return values, rewards, mask, correct


def test_seed_defaults():
    assert (SEED.beta, SEED.weight_clip_min, SEED.weight_clip_max) == (1.0, 0.1, 2.0)
    assert (SEED.gamma, SEED.lam) == (1.0, 1.0)


def test_td_errors_are_the_monte_carlo_error_when_gamma_lambda_are_one():
    values, rewards, mask, _ = two_samples()
    delta = vsm.td_errors(values, rewards, mask)
    # δ_t = R − V_t on policy tokens, 0 on masked ones (the masked 5.0 and 9.0 never enter).
    want = torch.tensor([[0.1, 0.5, 0.0, 1.5], [-0.3, -0.6, -0.1, 0.0]])
    assert torch.allclose(delta, want, atol=1e-6)


def test_td_weights_match_the_seed_formula_on_two_samples():
    values, rewards, mask, correct = two_samples()
    w, ce_mask = vsm.td_weights(values, rewards, mask, correct, SEED)
    # Correct row: clip(exp(δ/1), 0.1, 2): exp(0.1), exp(0.5), masked 0, exp(1.5)=4.48 → 2.0.
    want = torch.tensor([[math.exp(0.1), math.exp(0.5), 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(w, want, atol=1e-6)
    assert ce_mask.tolist() == [[1, 1, 0, 1], [0, 0, 0, 0]]  # the wrong row gets no CE
    stats = vsm.weight_stats(w, ce_mask, SEED)
    assert stats["joint/weight_mean"] == pytest.approx((math.exp(0.1) + math.exp(0.5) + 2) / 3)
    assert stats["joint/clip_high"] == pytest.approx(1 / 3)
    assert stats["joint/clip_low"] == 0.0


def test_beta_and_the_lower_clip():
    values = torch.tensor([[1.5, 0.7]])
    mask = torch.ones(1, 2)
    cfg = vsm.TDWeightConfig(beta=0.25)
    w, _ce_mask = vsm.td_weights(values, torch.tensor([1.0]), mask, torch.tensor([True]), cfg)
    # δ = −0.5, 0.3 → exp(−2) = 0.135, exp(1.2) = 3.32 → clipped to 2.
    assert torch.allclose(w, torch.tensor([[math.exp(-2.0), 2.0]]), atol=1e-6)
    w, _ = vsm.td_weights(
        torch.tensor([[3.0]]), torch.tensor([1.0]), torch.ones(1, 1), torch.tensor([True]), cfg
    )
    assert w.item() == pytest.approx(0.1)  # exp(−8) below the floor
    assert vsm.weight_stats(w, torch.ones(1, 1), cfg)["joint/clip_low"] == 1.0


def test_td_errors_with_lambda_zero_are_one_step():
    values = torch.tensor([[0.5, 0.7, 0.9]])
    delta = vsm.td_errors(values, torch.tensor([1.0]), torch.ones(1, 3), gamma=1.0, lam=0.0)
    assert torch.allclose(delta, torch.tensor([[0.2, 0.2, 0.1]]), atol=1e-6)


def test_weights_carry_no_gradient():
    values = torch.tensor([[0.2, 0.4]], requires_grad=True)
    w, _ = vsm.td_weights(values, torch.tensor([1.0]), torch.ones(1, 2), torch.tensor([True]), SEED)
    assert not w.requires_grad


def test_weighted_ce_and_joint_loss():
    ce = torch.tensor([[1.0, 2.0, 9.0, 3.0], [4.0, 4.0, 4.0, 4.0]])
    values, rewards, mask, correct = two_samples()
    w, ce_mask = vsm.td_weights(values, rewards, mask, correct, SEED)
    got = vsm.weighted_ce(ce, w, ce_mask)
    want = (math.exp(0.1) * 1 + math.exp(0.5) * 2 + 2.0 * 3) / 3
    assert got.item() == pytest.approx(want)
    total = vsm.joint_loss(got, torch.tensor(0.8), 0.05)
    assert total.item() == pytest.approx(want + 0.04)


def test_token_ce():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]]))
    ce = vsm.token_ce(logits, torch.tensor([[0, 2]]))
    assert torch.allclose(ce, torch.tensor([[math.log(2), -math.log(0.8)]]), atol=1e-6)


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"beta": 0}, "--beta"),
        ({"weight_clip_min": 3.0}, "--weight-clip-min"),
        ({"lam": 2}, "--lam"),
    ],
)
def test_bad_constants_name_the_flag(kw, flag):
    with pytest.raises(ValueError, match=flag):
        vsm.TDWeightConfig(**kw).check()
