"""``--kl-mode loss``: the KL loss term's gradient in expectation over the policy's own samples,
computed exactly on small categorical distributions (every token weighted by its probability),
against torch autograd of the exact KL; and the estimator default / refusal that follows from it
(k3 by default as a loss, k1 refused with exit 2)."""

from __future__ import annotations

import pytest
from support.lazy import heavy, torch
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.trainer.common import TrainConfigError

terms = heavy("ddai.trainer.ppo.terms")
train = heavy("ddai.trainer.ppo.train")

V, T = 7, 5  # vocabulary, positions


def _logits(seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, V, generator=g, dtype=torch.float64) * scale


def expected_kl_loss_grad(theta: torch.Tensor, ref_logits: torch.Tensor, kind: str) -> torch.Tensor:
    """``E_{y ~ π_θ}[∇_θ kl_loss]`` exactly: ``kl_loss`` over every token of every position, each
    weighted by its (detached) probability, is the expectation of the sampled loss, whose
    gradient (samples held fixed, as in PPO's update) is what an optimizer follows on average."""
    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)  # [T,V]: the "sampled" token y at every (t, y)
    ref = torch.log_softmax(ref_logits, -1)
    weight = logp.detach().exp()  # π_θ(y | t): Σ_y weight = 1 per position
    # token-mean over the weighted "mask": Σ_t Σ_y π(y)·k(t, y) / T
    loss, _ = terms.kl_loss(logp, ref, weight, kind=kind)
    (grad,) = torch.autograd.grad(loss, theta)
    return grad


def exact_kl_grad(theta: torch.Tensor, ref_logits: torch.Tensor, *, reverse: bool) -> torch.Tensor:
    """``∇_θ`` of the mean over positions of ``KL(π_θ ‖ π_ref)`` (or ``KL(π_ref ‖ π_θ)``)."""
    theta = theta.clone().requires_grad_(True)
    logp, ref = torch.log_softmax(theta, -1), torch.log_softmax(ref_logits, -1)
    if reverse:
        kl = (ref.exp() * (ref - logp)).sum(-1).mean()
    else:
        kl = (logp.exp() * (logp - ref)).sum(-1).mean()
    (grad,) = torch.autograd.grad(kl, theta)
    return grad


@pytest.mark.parametrize("scale", [0.1, 1.0])
def test_k2_and_k3_loss_gradients_are_exact_kl_gradients_k1s_is_zero(scale):
    theta = _logits(0)
    ref_logits = theta + _logits(1, scale)  # the reference, a perturbation of the policy
    forward = exact_kl_grad(theta, ref_logits, reverse=False)  # ∇KL(π ‖ π_ref)
    reverse = exact_kl_grad(theta, ref_logits, reverse=True)  # ∇KL(π_ref ‖ π)
    k1 = expected_kl_loss_grad(theta, ref_logits, "k1")
    k2 = expected_kl_loss_grad(theta, ref_logits, "k2")
    k3 = expected_kl_loss_grad(theta, ref_logits, "k3")

    assert forward.norm() > 1e-3  # a real pull towards the reference to match
    # k2 = ½(log π − log π_ref)²: E[∇k2] = ∇KL(π ‖ π_ref), exactly.
    torch.testing.assert_close(k2, forward, rtol=1e-12, atol=1e-14)
    # k3 = r − log r − 1 (r = π_ref/π): E[∇k3] = E[(1 − r)∇log π] = ∇KL(π_ref ‖ π), exactly; the
    # two KLs share their minimum and their curvature there (the Fisher metric), so near the
    # reference k3 pulls the way ∇KL(π ‖ π_ref) does.
    torch.testing.assert_close(k3, reverse, rtol=1e-12, atol=1e-14)
    cos = torch.nn.functional.cosine_similarity(k3.flatten(), forward.flatten(), dim=0)
    assert cos > (0.99 if scale < 1 else 0.8)
    # k1 = log π − log π_ref: E[∇k1] = E[∇log π] = 0: no pull at all, whatever the distance.
    assert k1.abs().max() < 1e-15 * forward.abs().max() + 1e-15
    assert not torch.allclose(k1, forward, atol=1e-3 * forward.abs().max().item())


def test_a_k3_kl_loss_step_moves_the_policy_towards_the_reference():
    """One gradient step on each estimator's expected loss: k2 and k3 lower the exact KL, k1
    leaves it where it was (its step is float noise)."""
    theta, ref_logits = _logits(2), _logits(3)

    def kl(th):
        logp, ref = torch.log_softmax(th, -1), torch.log_softmax(ref_logits, -1)
        return float((logp.exp() * (logp - ref)).sum(-1).mean())

    before = kl(theta)
    after = {k: kl(theta - 0.5 * expected_kl_loss_grad(theta, ref_logits, k)) for k in KINDS}
    assert after["k2"] < before - 1e-3 and after["k3"] < before - 1e-3
    assert after["k1"] == pytest.approx(before, abs=1e-12)


KINDS = ("k1", "k2", "k3")


def _cfg(**kw) -> train.PPORunConfig:
    return train.PPORunConfig(model="m", data="d", corpus="c", output_dir="o", **kw)


def test_estimator_default_follows_the_kl_mode_and_k1_is_refused_as_a_loss():
    assert _cfg().kl_estimator == "k1"  # as a reward penalty: unbiased, no gradient needed
    assert _cfg(kl_mode="loss").kl_estimator == "k3"  # as a loss: verl's KL loss estimator
    assert _cfg(kl_mode="loss", kl_estimator="k2").kl_estimator == "k2"
    _cfg(kl_mode="loss").check()
    _cfg(kl_mode="loss", kl_estimator="k2").check()
    _cfg(kl_mode="reward", kl_estimator="k3").check()
    with pytest.raises(TrainConfigError, match="--kl-estimator k3") as err:
        _cfg(kl_mode="loss", kl_estimator="k1").check()
    assert "k2" in str(err.value)


def test_cli_kl_loss_with_k1_exits_2_naming_k3_and_the_default_is_k3(tmp_path, monkeypatch):
    from ddai.trainer.ppo import train as ppo

    (tmp_path / "d.parquet").write_bytes(b"")  # exist-checks only: the run itself is stubbed
    (tmp_path / "c.parquet").write_bytes(b"")
    base = ["train", "ppo", "--model", "m", "--data", str(tmp_path / "d.parquet")]
    base += ["--corpus", str(tmp_path / "c.parquet"), "--out-dir", str(tmp_path / "o")]
    runner = CliRunner()
    seen: list[train.PPORunConfig] = []

    def fake_run(cfg, backends=None):
        seen.append(cfg)
        cfg.check()
        raise TrainConfigError("stop here")

    monkeypatch.setattr(ppo, "run_ppo", fake_run)
    res = runner.invoke(app, [*base, "--kl-mode", "loss", "--kl-estimator", "k1"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "--kl-estimator k3" in said and "k2" in said and "k1" in said
    res = runner.invoke(app, [*base, "--kl-mode", "loss"])
    assert res.exit_code == 2 and "stop here" in res.output
    assert seen[-1].kl_estimator == "k3"  # not given: k3 with --kl-mode loss
    runner.invoke(app, base)
    assert seen[-1].kl_estimator == "k1"  # not given: k1 with --kl-mode reward


def test_an_unknown_critic_head_is_refused_before_any_model_loads():
    """A fresh critic's ``--critic-head`` is checked with the other flags (it was first read when
    the critic was built, after the policy had loaded), with a checkpoint too."""
    _cfg(critic_head="mlp").check()
    with pytest.raises(TrainConfigError, match=r"--critic-head 'mpl': use one of linear, mlp"):
        _cfg(critic_head="mpl").check()
    with pytest.raises(TrainConfigError, match=r"--critic-head 'mpl'"):  # with --critic too
        _cfg(critic="critic_dir", critic_head="mpl").check()
    _cfg(critic="critic_dir").check()  # the checkpoint names its head
