"""Seed 003's PPO options against hand-computed cases: KL as a loss term vs folded into the
rewards (values and gradients, k1/k2/k3), reward normalization, the entropy bonus, and the value
loss with clipping off equal to the seed's ``critic_weight · (R − V)²``."""

from __future__ import annotations

import math

import pytest
from support.lazy import heavy, torch

ppo = heavy("ddai.trainer.ppo.train")
terms = heavy("ddai.trainer.ppo.terms")
vl = heavy("ddai.trainer.value.losses")
data = heavy("ddai.trainer.value.data")

# One rollout, two policy tokens: policy log-probs [-1, -0.5], reference [-1.5, -1], so
# log π − log π_ref = 0.5 on both; k1 = 0.5, k2 = ½·0.25 = 0.125, k3 = e^-0.5 + 0.5 − 1.
POLICY = [[-1.0, -0.5]]
REF = [[-1.5, -1.0]]
K3 = math.exp(-0.5) - 0.5


class StubCritic:
    def __init__(self, values):
        self.values = values

    def completion_values(self, input_ids, attention_mask, prompt_len, images=None):
        return self.values


def _cfg(**kw) -> ppo.PPORunConfig:
    base = dict(model="m", data="d", corpus="c", output_dir="o", kl_coef=0.1, gamma=1.0, lam=1.0)
    return ppo.PPORunConfig(**{**base, "whiten_advantages": False, **kw})


def _experience(monkeypatch, cfg, scores=(1.0,), values=None, batch=None):
    from ddai.trainer.ppo import train as ppo

    batch = batch or data.pad_batch([[1]], [[2, 3]], [[1, 1]], pad_id=0)
    logps = {"policy": torch.tensor(POLICY), "ref": torch.tensor(REF)}
    monkeypatch.setattr(ppo, "token_logprobs", lambda model, b, temperature=1.0: logps[model])
    values = values if values is not None else torch.zeros_like(batch.mask, dtype=torch.float32)
    return ppo.make_experience(
        "policy", "ref", StubCritic(values), batch, torch.tensor(scores), cfg
    )


def test_kl_in_reward_vs_kl_as_loss_hand_computed(monkeypatch):
    # KL in the reward: rewards [-0.05, 1 - 0.05]; GAE (γ = λ = 1, V = 0): A = [0.9, 0.95].
    in_reward = _experience(monkeypatch, _cfg(kl_mode="reward"))
    assert torch.allclose(in_reward.advantages, torch.tensor([[0.9, 0.95]]))
    assert in_reward.ref_logp is None
    # KL as a loss: the rewards are the outcome alone, A = [1, 1]; the KL is still measured.
    as_loss = _experience(monkeypatch, _cfg(kl_mode="loss"))
    assert torch.allclose(as_loss.advantages, torch.tensor([[1.0, 1.0]]))
    assert torch.allclose(as_loss.kl, torch.tensor([[K3, K3]]))  # k3: the loss mode's default
    assert torch.equal(as_loss.ref_logp, torch.tensor(REF))

    def loss_and_grad(exp, **kw):
        logp = torch.tensor(POLICY, requires_grad=True)  # the first epoch: ratio 1
        loss, metrics = terms.actor_loss(
            logp, exp.old_logp, exp.advantages, exp.batch.mask, eps_low=0.2, eps_high=0.2, **kw
        )
        loss.backward()
        return loss.item(), logp.grad, metrics

    # In the reward: L = −mean(A) = −0.925; ∂L/∂logp_t = −A_t / 2.
    loss, grad, _ = loss_and_grad(in_reward)
    assert loss == pytest.approx(-0.925)
    assert torch.allclose(grad, torch.tensor([[-0.45, -0.475]]))
    # As a loss: L = −1 + β·mean(k); ∂L/∂logp_t = −1/2 + β·∂k_t/∂logp_t / 2.
    cases = {
        "k1": (0.5, 1.0),  # ∂k1 = 1: a constant push, zero in expectation
        "k2": (0.125, 0.5),  # ∂k2 = log π − log π_ref
        "k3": (K3, 1 - math.exp(-0.5)),  # ∂k3 = 1 − π_ref/π
    }
    for kind, (k, dk) in cases.items():
        loss, grad, metrics = loss_and_grad(
            as_loss, ref_logp=as_loss.ref_logp, kl_coef=0.1, kl_kind=kind
        )
        assert loss == pytest.approx(-1 + 0.1 * k, abs=1e-6), kind
        assert metrics["actor/kl_loss"] == pytest.approx(k, abs=1e-6)
        assert metrics["actor/pg_loss"] == pytest.approx(-1.0)
        assert torch.allclose(grad, torch.full((1, 2), -0.5 + 0.1 * dk / 2)), kind


def test_kl_loss_ignores_masked_tokens_and_carries_no_gradient_to_the_reference():
    ref = torch.tensor(REF, requires_grad=True)
    loss, _ = terms.kl_loss(
        torch.tensor([[-1.0, -9.0]]), ref, torch.tensor([[1, 0]]), kind="k2"
    )  # the second token is an observation
    assert loss.item() == pytest.approx(0.125)
    assert not loss.requires_grad


def test_reward_normalization_hand_computed(monkeypatch):
    from ddai.trainer.ppo import train as ppo

    s = torch.tensor([0.0, 2.0, 4.0])  # mean 2, unbiased std 2
    assert torch.allclose(terms.normalize_scores(s, "none"), s)
    assert torch.allclose(terms.normalize_scores(s, "center"), torch.tensor([-2.0, 0.0, 2.0]))
    assert torch.allclose(terms.normalize_scores(s, "scale"), torch.tensor([0.0, 1.0, 2.0]))
    assert torch.allclose(terms.normalize_scores(s, "whiten"), torch.tensor([-1.0, 0.0, 1.0]))
    assert torch.equal(
        terms.whiten(torch.tensor([3.0])), torch.tensor([3.0])
    )  # no spread: unchanged
    with pytest.raises(ValueError, match="none, center, scale, whiten"):
        terms.normalize_scores(s, "minmax")
    # In the experience: two one-token rollouts scored [1, 3], whitened to ∓1/√2 before GAE.
    batch = data.pad_batch([[1], [1]], [[2], [3]], [[1], [1]], pad_id=0)
    monkeypatch.setattr(ppo, "token_logprobs", lambda model, b, temperature=1.0: torch.zeros(2, 1))
    exp = ppo.make_experience(
        "policy",
        None,
        StubCritic(torch.zeros(2, 1)),
        batch,
        torch.tensor([1.0, 3.0]),
        _cfg(reward_norm="whiten"),
    )
    assert torch.allclose(exp.returns, torch.tensor([[-(0.5**0.5)], [0.5**0.5]]))


def test_entropy_bonus_hand_computed():
    logits = torch.log(torch.tensor([[[1.0, 1.0, 1.0, 1.0], [1.0, 3.0, 0.0, 0.0]]]))  # [1,2,4]
    h = terms.token_entropy(logits)
    # uniform over 4: ln 4; [¼, ¾, 0, 0]: −(¼ ln ¼ + ¾ ln ¾)
    expected = [math.log(4), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]
    assert torch.allclose(h, torch.tensor([expected]), atol=1e-6)
    logp = torch.zeros(1, 2)
    adv, mask = torch.ones(1, 2), torch.ones(1, 2)
    loss, metrics = terms.actor_loss(
        logp, logp, adv, mask, eps_low=0.2, eps_high=0.2, entropy=h, entropy_coef=0.01
    )
    assert loss.item() == pytest.approx(-1 - 0.01 * sum(expected) / 2, abs=1e-6)
    assert metrics["actor/entropy"] == pytest.approx(sum(expected) / 2, abs=1e-6)
    # Off by default: the loss is the clipped surrogate alone.
    assert (
        terms.actor_loss(logp, logp, adv, mask, eps_low=0.2, eps_high=0.2, entropy=h)[0].item()
        == -1
    )


def test_entropy_gradient_raises_entropy():
    logits = torch.tensor([[[2.0, 0.0, 0.0, -torch.inf]]], requires_grad=True)
    (-terms.token_entropy(logits).sum()).backward()  # the bonus's direction
    # Descending −H lowers the favoured logit: the distribution spreads out.
    assert logits.grad[0, 0, 0] > 0 and logits.grad[0, 0, 1] < 0
    assert logits.grad[0, 0, 3] == 0  # a masked-out token: no NaN


def test_unclipped_value_loss_is_the_seeds_critic_loss():
    values, returns, mask = torch.tensor([[0.5, 2.0]]), torch.tensor([[1.0, 1.0]]), torch.ones(1, 2)
    critic_weight = 0.5  # seed 003: loss = ppo_loss + critic_weight · (rewards − values)²
    seed = (critic_weight * (returns - values) ** 2).mean()  # 0.5 · (0.25 + 1) / 2
    loss, _ = vl.clipped_value_loss(values, values, returns, mask, clip=None)
    assert loss.item() == pytest.approx(seed.item()) == pytest.approx(0.3125)
    # Clipped (the reference-implementation detail): V = 1.2 from V_old = 0.5 with c = 0.2 is
    # clipped to 0.7; max((1.2 − 1)², (0.7 − 1)²) = 0.09 → ½·0.09.
    loss_c, m = vl.clipped_value_loss(
        torch.tensor([[1.2]]),
        torch.tensor([[0.5]]),
        torch.tensor([[1.0]]),
        torch.ones(1, 1),
        clip=0.2,
    )
    assert loss_c.item() == pytest.approx(0.045) and m["critic/vf_clipfrac"] == 1.0


def test_bad_option_values_name_the_flag():
    from ddai.trainer.common import TrainConfigError

    for kw, flag in (
        ({"kl_mode": "both"}, "--kl-mode"),
        ({"reward_norm": "minmax"}, "--reward-norm"),
        ({"entropy_coef": -0.1}, "--entropy-coef"),
        ({"kl_estimator": "k2"}, None),
    ):
        cfg = _cfg(**kw)
        if flag is None:
            cfg.check()  # k2 is a known estimator
            continue
        with pytest.raises(TrainConfigError, match=flag):
            cfg.check()


def test_advantage_whitening_is_verls_masked_whiten_not_the_seeds_whiten(monkeypatch):
    """Seed 003's ``whiten`` divides by ``std + 1e-8``; PPO's advantages are whitened by
    ``masked_whiten``, ``(A − mean)·rsqrt(var + 1e-8)`` (verl's), which agrees on a batch with
    spread and damps one whose advantages are all about 0 instead of blowing them up to std 1."""
    from ddai.trainer.ppo import train as ppo

    batch = data.pad_batch([[1], [1]], [[2], [3]], [[1], [1]], pad_id=0)
    monkeypatch.setattr(ppo, "token_logprobs", lambda model, b, temperature=1.0: torch.zeros(2, 1))

    def advantages(values):
        cfg = _cfg(kl_coef=0.0, whiten_advantages=True)
        exp = ppo.make_experience(
            "policy", None, StubCritic(torch.tensor(values)), batch, torch.zeros(2), cfg
        )
        return exp.advantages

    # A = R − V = ∓1: mean 0, unbiased var 2 → ∓1/√2 both ways (the eps is negligible).
    spread = advantages([[1.0], [-1.0]])
    assert torch.allclose(spread, torch.tensor([[-(0.5**0.5)], [0.5**0.5]]), atol=1e-6)
    assert torch.allclose(terms.whiten(torch.tensor([-1.0, 1.0])), spread.flatten(), atol=1e-6)
    # A = ∓1e-4: var 2e-8, so rsqrt(2e-8 + 1e-8) gives ∓1e-4·√(1/3e-8) = ∓1/√3, where the
    # seed's whiten gives ∓1e-4 / (√2e-8 + 1e-8) ≈ ∓0.70706.
    flat = advantages([[1e-4], [-1e-4]])
    assert torch.allclose(flat, torch.tensor([[-((1 / 3) ** 0.5)], [(1 / 3) ** 0.5]]), atol=1e-5)
    seed = terms.whiten(torch.tensor([-1e-4, 1e-4]))
    assert seed[1].item() == pytest.approx(1e-4 / (2e-8**0.5 + 1e-8), rel=1e-5)
