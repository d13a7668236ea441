"""Value-head losses against hand-computed values: MC tokenwise MSE, pairwise ranking, the hybrid,
TD(λ) targets, and the held-out ranking metrics (AUC, pairwise accuracy)."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

value = heavy("oracles.value")
losses = heavy("ddai.trainer.value.losses")


def T(data, **kw):
    return torch.tensor(data, **kw)


def test_mc_mse_hand_computed_with_attention_and_response_masks():
    values = T([[0.5, 0.2, 0.9, 0.4], [0.3, 0.6, 0.1, 0.7]])
    rewards = T([1.0, 0.0])
    attention = T([[1, 1, 1, 0], [1, 1, 1, 1]])
    response = T([[1, 0, 1, 1], [0, 1, 1, 1]])
    # combined mask [[1,0,1,0],[0,1,1,1]]:
    # row 0 vs 1: (0.5-1)^2 = 0.25, (0.9-1)^2 = 0.01; row 1 vs 0: 0.36, 0.01, 0.49
    # (0.25 + 0.01 + 0.36 + 0.01 + 0.49) / 5 = 1.12 / 5 = 0.224
    loss, metrics = losses.mc_value_loss(values, rewards, attention, response)
    assert loss.item() == pytest.approx(0.224, abs=1e-7)
    assert metrics["value/mc_mse"] == pytest.approx(0.224, abs=1e-7)


def test_mc_mse_gives_observation_tokens_no_gradient():
    values = T([[0.5, 0.2, 0.9]], requires_grad=True)
    mask = T([[1, 0, 1]])  # the middle token is an observation
    loss, _ = losses.mc_value_loss(values, T([1.0]), torch.ones_like(mask), mask)
    loss.backward()
    # d/dv (v-1)^2 / 2 = (v-1): -0.5 and -0.1 on policy tokens, exactly 0 on the observation.
    assert torch.allclose(values.grad, T([[-0.5, 0.0, -0.1]]), atol=1e-7)
    assert values.grad[0, 1] == 0


def test_mc_mse_accepts_per_token_targets():
    values = T([[0.5, 0.5]])
    loss, _ = losses.mc_value_loss(values, T([[1.0, 0.0]]), T([[1, 1]]), T([[1, 1]]))
    assert loss.item() == pytest.approx((0.25 + 0.25) / 2)


def _pairs():
    # Pair 0: v+ = mean(0.6, 0.6) = 0.6 (the 9.0 is padding), v- = 0.2 -> diff +0.4
    # Pair 1: v+ = mean(0.0, 0.2) = 0.1, v- = mean(0.5, 0.5) = 0.5 -> diff -0.4
    pos = T([[0.6, 0.6, 9.0], [0.0, 0.2, 0.0]])
    pos_m = T([[1, 1, 0], [1, 1, 0]])
    neg = T([[0.2, -5.0], [0.5, 0.5]])
    neg_m = T([[1, 0], [1, 1]])
    return pos, neg, pos_m, neg_m


def test_pairwise_ranking_loss_hand_computed():
    pos, neg, pos_m, neg_m = _pairs()
    loss, metrics = losses.pairwise_ranking_loss(pos, neg, pos_m, neg_m)
    # -log σ(0.4) = log(1 + e^-0.4) = 0.5130152524; -log σ(-0.4) = log(1 + e^0.4) = 0.9130152524
    want = (math.log1p(math.exp(-0.4)) + math.log1p(math.exp(0.4))) / 2
    assert want == pytest.approx(0.7130152524, abs=1e-9)
    assert loss.item() == pytest.approx(want, abs=1e-6)
    assert metrics["value/pairwise_acc"] == 0.5
    assert metrics["value/margin"] == pytest.approx(0.0, abs=1e-6)


def test_pairwise_gradient_pushes_positive_up_and_negative_down():
    pos = T([[0.0, 0.0]], requires_grad=True)
    neg = T([[0.0]], requires_grad=True)
    loss, _ = losses.pairwise_ranking_loss(pos, neg, T([[1, 1]]), T([[1]]))
    loss.backward()
    # d/d diff of -log σ(diff) at 0 is -σ(-0) = -0.5; each positive token carries 1/2 of the mean.
    assert torch.allclose(pos.grad, T([[-0.25, -0.25]]))
    assert torch.allclose(neg.grad, T([[0.5]]))


def test_hybrid_hand_computed():
    pos, neg, pos_m, neg_m = _pairs()
    loss, metrics = losses.hybrid_value_loss(pos, neg, pos_m, neg_m, pairwise_coef=1.0, mc_coef=0.5)
    # MC on positives (target 1): (0.4^2 + 0.4^2 + 1.0^2 + 0.8^2) / 4 = 1.96 / 4 = 0.49
    # MC on negatives (target 0): (0.2^2 + 0.5^2 + 0.5^2) / 3 = 0.54 / 3 = 0.18
    # hybrid = 0.7130152524 + 0.5 * (0.49 + 0.18) / 2 = 0.7130152524 + 0.1675
    assert metrics["value/mc_mse"] == pytest.approx(0.335, abs=1e-6)
    assert loss.item() == pytest.approx(0.8805152524, abs=1e-6)
    assert metrics["value/loss"] == pytest.approx(loss.item())
    only_mc, _ = losses.hybrid_value_loss(pos, neg, pos_m, neg_m, pairwise_coef=0.0, mc_coef=1.0)
    assert only_mc.item() == pytest.approx(0.335, abs=1e-6)
    custom, _ = losses.hybrid_value_loss(
        pos,
        neg,
        pos_m,
        neg_m,
        pos_rewards=T([0.6, 0.6]),
        neg_rewards=T([0.2, 0.2]),
        pairwise_coef=0.0,
        mc_coef=1.0,
    )
    # positives vs 0.6: (0 + 0 + 0.36 + 0.16) / 4 = 0.13; negatives vs 0.2: (0 + 0.09 + 0.09) / 3 = 0.06
    assert custom.item() == pytest.approx((0.13 + 0.06) / 2, abs=1e-6)


def test_stacked_pairs_are_the_successes_then_their_failures():
    pos, neg, pos_m, neg_m = _pairs()
    # one batch, the failures padded to the successes' length with masked-out tokens
    values = torch.cat([pos, torch.nn.functional.pad(neg, (0, 1), value=7.0)])
    mask = torch.cat([pos_m, torch.nn.functional.pad(neg_m, (0, 1))])
    # successes' targets 1 then failures' 0: the hand-computed hybrid above
    loss, metrics = losses.stacked_pairs_loss(
        values, mask, T([1.0, 1.0, 0.0, 0.0]), pairwise_coef=1.0, mc_coef=0.5
    )
    assert loss.item() == pytest.approx(0.8805152524, abs=1e-6)
    assert metrics["value/mc_mse"] == pytest.approx(0.335, abs=1e-6)
    custom, _ = losses.stacked_pairs_loss(
        values, mask, T([0.6, 0.6, 0.2, 0.2]), pairwise_coef=0.0, mc_coef=1.0
    )
    assert custom.item() == pytest.approx((0.13 + 0.06) / 2, abs=1e-6)


def test_sequence_mean_of_empty_row_is_zero():
    assert torch.equal(
        losses.sequence_mean(T([[1.0, 2.0], [3.0, 4.0]]), T([[1, 1], [0, 0]])), T([1.5, 0.0])
    )


def test_td_lambda_targets_mc_and_one_step():
    rewards = T([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    values = T([[0.2, 0.4, 0.6, 0.8]], dtype=torch.float64)
    mask = torch.ones(1, 4)
    # γ = λ = 1: the Monte-Carlo return, i.e. the outcome broadcast to every policy token.
    mc = value.td_lambda_targets(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(mc, torch.ones(1, 4, dtype=torch.float64))
    # λ = 0: r_t + γ V_{t+1} = [0.9·0.4, 0.9·0.6, 0.9·0.8, 1] = [0.36, 0.54, 0.72, 1.0]
    td0 = value.td_lambda_targets(rewards, values, mask, gamma=0.9, lam=0.0)
    assert torch.allclose(td0, T([[0.36, 0.54, 0.72, 1.0]], dtype=torch.float64))


def test_td_lambda_targets_bootstrap_across_an_observation_span():
    rewards = T([[0.0, 5.0, 5.0, 1.0]], dtype=torch.float64)  # rewards on observations are ignored
    values = T([[0.2, 9.0, 9.0, 0.8]], dtype=torch.float64)
    mask = T([[1, 0, 0, 1]])
    # t=3: 1; t=0 bootstraps from the next *policy* token: 0.9 · 0.8 = 0.72; observations: 0.
    got = value.td_lambda_targets(rewards, values, mask, gamma=0.9, lam=0.0)
    assert torch.allclose(got, T([[0.72, 0.0, 0.0, 1.0]], dtype=torch.float64))


def test_roc_auc_hand_computed_with_ties():
    # Classic example: positives 0.35, 0.8; negatives 0.1, 0.4 -> 3 of 4 pairs ranked right.
    assert losses.roc_auc(T([0.1, 0.4, 0.35, 0.8]), T([0, 0, 1, 1])) == pytest.approx(0.75)
    # Positives {0.5, 0.9}, negatives {0.5, 0.2}: (0.5 tie -> 1/2) + 1 + 1 + 1 = 3.5 of 4.
    assert losses.roc_auc(T([0.5, 0.5, 0.2, 0.9]), T([1, 0, 0, 1])) == pytest.approx(0.875)
    assert math.isnan(losses.roc_auc(T([0.1, 0.2]), T([1, 1])))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_auc_equals_the_pair_count_definition(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 6, (40,), generator=g).double() / 5  # many ties
    labels = torch.rand(40, generator=g) < 0.4
    pos, neg = scores[labels], scores[~labels]
    d = pos[:, None] - neg[None, :]
    want = float(((d > 0).double() + 0.5 * (d == 0).double()).mean())
    assert losses.roc_auc(scores, labels) == pytest.approx(want, abs=1e-12)
    assert losses.pairwise_accuracy(pos[:10], neg[:10]) == pytest.approx(
        float(((pos[:10] > neg[:10]).double() + 0.5 * (pos[:10] == neg[:10]).double()).mean())
    )
