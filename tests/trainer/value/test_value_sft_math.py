"""Seed 004's TD weights and weighted CE against hand-computed values."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

vsm = heavy("ddai.trainer.value.sft_math")
value = heavy("oracles.value")


def two_samples():
    """Row 0 correct (R=1), row 1 wrong (R=0); mask 0 = prompt/observation/padding tokens."""
    values = torch.tensor([[0.9, 0.5, 5.0, -0.5], [0.3, 0.6, 0.1, 9.0]])
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]])
    rewards = torch.tensor([1.0, 0.0])
    correct = torch.tensor([True, False])
    return values, rewards, mask, correct


def test_seed_defaults():
    seed = vsm.TDWeightConfig()  # β 1, clip [0.1, 2], γ 1, λ 1
    assert (seed.beta, seed.weight_clip_min, seed.weight_clip_max) == (1.0, 0.1, 2.0)
    assert (seed.gamma, seed.lam) == (1.0, 1.0)


def test_td_errors_are_the_monte_carlo_error_when_gamma_lambda_are_one():
    values, rewards, mask, _ = two_samples()
    delta = vsm.td_errors(values, rewards, mask)
    # δ_t = R − V_t on policy tokens, 0 on masked ones (the masked 5.0 and 9.0 never enter).
    want = torch.tensor([[0.1, 0.5, 0.0, 1.5], [-0.3, -0.6, -0.1, 0.0]])
    assert torch.allclose(delta, want, atol=1e-6)


def test_td_weights_match_the_seed_formula_on_two_samples():
    values, rewards, mask, correct = two_samples()
    w, ce_mask = vsm.td_weights(values, rewards, mask, correct, vsm.TDWeightConfig())
    # Correct row: clip(exp(δ/1), 0.1, 2): exp(0.1), exp(0.5), masked 0, exp(1.5)=4.48 → 2.0.
    want = torch.tensor([[math.exp(0.1), math.exp(0.5), 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(w, want, atol=1e-6)
    assert ce_mask.tolist() == [[1, 1, 0, 1], [0, 0, 0, 0]]  # the wrong row gets no CE
    stats = vsm.weight_stats(w, ce_mask, vsm.TDWeightConfig())
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
    w, _ = vsm.td_weights(
        values, torch.tensor([1.0]), torch.ones(1, 2), torch.tensor([True]), vsm.TDWeightConfig()
    )
    assert not w.requires_grad


def test_weighted_ce_and_joint_loss():
    ce = torch.tensor([[1.0, 2.0, 9.0, 3.0], [4.0, 4.0, 4.0, 4.0]])
    values, rewards, mask, correct = two_samples()
    w, ce_mask = vsm.td_weights(values, rewards, mask, correct, vsm.TDWeightConfig())
    got = vsm.weighted_ce(ce, w, ce_mask)
    want = (math.exp(0.1) * 1 + math.exp(0.5) * 2 + 2.0 * 3) / 3
    assert got.item() == pytest.approx(want)
    total = vsm.joint_loss(got, torch.tensor(0.8), 0.05)
    assert total.item() == pytest.approx(want + 0.04)


def test_token_ce():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]]))
    ce = value.token_ce(logits, torch.tensor([[0, 2]]))
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


def _ce_case(dtype, V=301, H=24, B=3, T=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g).to(dtype).requires_grad_()
    head = torch.nn.Linear(H, V, bias=False).to(dtype)
    with torch.no_grad():
        head.weight.copy_(torch.randn(V, H, generator=g) * 2)
    targets = torch.randint(0, V, (B, T), generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    return hidden, head, targets, mask


@pytest.mark.parametrize("chunk", [1, 4, 512])
def test_chunked_token_ce_equals_the_full_vocabulary_reference(chunk):
    hidden, head, targets, mask = _ce_case(torch.float32)
    got = vsm.chunked_token_ce(hidden, head, targets, mask, chunk=chunk)
    want = value.token_ce(head(hidden), targets) * mask
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-6)
    assert torch.all(got[mask == 0] == 0)
    w = torch.rand(mask.shape, generator=torch.Generator().manual_seed(1))
    g_got = torch.autograd.grad((got * w).sum(), [hidden, head.weight])
    g_want = torch.autograd.grad((want * w).sum(), [hidden, head.weight])
    for a, b in zip(g_got, g_want, strict=True):
        assert torch.allclose(a, b, atol=2e-5, rtol=1e-5)  # of gradients up to ~6


def test_chunked_token_ce_in_bf16_matches_the_float32_reference_of_the_same_logits():
    hidden, head, targets, mask = _ce_case(torch.bfloat16, V=4096)
    got = vsm.chunked_token_ce(hidden, head, targets, mask, chunk=8)
    assert got.dtype == torch.float32
    want = value.token_ce(head(hidden), targets) * mask  # the bf16 logits, upcast whole
    assert (got - want).abs().max() < 2e-3 * want.abs().max()


def test_chunked_token_ce_memory_grows_with_the_chunk_not_the_tokens():
    from oracles.memory_meter import TensorMemoryMeter

    V, T, chunk = 4096, 64, 32
    block = chunk * V * 4  # one float32 [chunk, V] block

    def peak(B: int, chunked: bool) -> int:
        hidden, head, targets, mask = _ce_case(torch.float32, V=V, H=16, B=B, T=T)
        mask = torch.ones_like(mask)
        with TensorMemoryMeter() as m:
            if chunked:
                ce = vsm.chunked_token_ce(hidden, head, targets, mask, chunk=chunk)
            else:
                ce = value.token_ce(head(hidden), targets)
            ce.sum().backward()
        return m.peak

    # 4x the tokens (128 -> 512 positions): the reference holds 4x the [n, V] buffers; the
    # chunked loss adds only the hidden states' and targets' share (O(n x H), no V).
    small, large = peak(2, True), peak(8, True)
    ref_small, ref_large = peak(2, False), peak(8, False)
    assert ref_large - ref_small > 3 * (8 - 2) * T * V * 4 / 2  # grows with tokens x vocabulary
    assert large - small < block
    assert large < 6 * block  # a few blocks in flight: logits, exp, their gradients
