"""``ddai train ppo``: the experience wiring against hand-computed values, then a few PPO steps on
the toy search task with a tiny policy (the weights change, the value loss falls, rollouts are
logged), and bad flags that exit 2 naming the fix."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from support.lazy import heavy, torch
from support.toy_world import make_world, run_fields
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts
from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.tiny import TinySpec, build_tiny

ppo = heavy("ddai.trainer.ppo.train")
value_data = heavy("ddai.trainer.value.data")
value_model = heavy("ddai.trainer.value.model")

runner = CliRunner()


def said(res) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(res.output.split())


class StubCritic:
    def __init__(self, values):
        self.values = values

    def completion_values(self, input_ids, attention_mask, prompt_len, images=None):
        return self.values


def test_experience_folds_kl_into_rewards_and_bootstraps_across_observations(monkeypatch):
    from ddai.trainer.ppo import train as ppo

    batch = value_data.pad_batch(
        [[1]], [[2, 3, 4]], [[1, 0, 1]], pad_id=0
    )  # the middle token is an observation
    logps = {
        "policy": torch.tensor([[-1.0, -9.0, -0.5]]),
        "ref": torch.tensor([[-1.5, -9.0, -1.0]]),
    }
    monkeypatch.setattr(ppo, "token_logprobs", lambda model, b, temperature=1.0: logps[model])
    cfg = ppo.PPORunConfig(
        model="m",
        data="d",
        corpus="c",
        output_dir="o",
        kl_coef=0.1,
        gamma=1.0,
        lam=1.0,
        whiten_advantages=False,
    )
    exp = ppo.make_experience(
        "policy",
        "ref",
        StubCritic(torch.tensor([[0.2, 7.0, 0.4]])),
        batch,
        torch.tensor([1.0]),
        cfg,
    )
    # k1 = [0.5, ·, 0.5]; rewards = [-0.05, 0, -0.05 + 1] (outcome on the last policy token)
    assert torch.allclose(exp.kl, torch.tensor([[0.5, 0.0, 0.5]]))
    # GAE, γ = λ = 1, values [0.2, ·, 0.4]: A2 = 0.95 - 0.4 = 0.55; A0 = -0.05 + 0.4 - 0.2 + 0.55 = 0.7
    assert torch.allclose(exp.advantages, torch.tensor([[0.7, 0.0, 0.55]]))
    assert torch.allclose(exp.returns, torch.tensor([[0.9, 0.0, 0.95]]))
    assert torch.equal(exp.old_values, torch.tensor([[0.2, 0.0, 0.4]]))
    # Without a reference (KL off) the rewards are the outcome alone.
    exp0 = ppo.make_experience(
        "policy", None, StubCritic(torch.zeros(1, 3)), batch, torch.tensor([1.0]), cfg
    )
    assert (
        torch.allclose(exp0.returns, torch.tensor([[1.0, 0.0, 1.0]])) and exp0.kl.abs().sum() == 0
    )


def test_token_logprobs_reads_logits_before_each_completion_token():
    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask, position_ids, use_cache):
            logits = torch.zeros(*input_ids.shape, 4)
            logits[..., 2] = 1.0  # token 2 is e times likelier than each other token
            return SimpleNamespace(logits=logits)

    batch = value_data.pad_batch([[1, 1]], [[2, 3]], [[1, 1]], pad_id=0)
    lp = ppo.token_logprobs(Uniform(), batch)
    z = 3 + torch.e
    assert torch.allclose(
        lp, torch.tensor([[1 - torch.log(torch.tensor(z)), -torch.log(torch.tensor(z))]])
    )
    # Temperature divides the logits: at T = 2, token 2 has weight e^0.5.
    lp2 = ppo.token_logprobs(Uniform(), batch, temperature=2.0)
    assert lp2[0, 0].item() == pytest.approx(
        0.5 - torch.log(torch.tensor(3 + torch.e**0.5)).item(), abs=1e-6
    )


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ppo"), hidden_size=32)


@pytest.mark.slow
def test_ppo_steps_change_weights_lower_value_loss_and_log_rollouts(toy_world):
    root, data, tiny = toy_world
    cfg = ppo.PPORunConfig(
        **run_fields(tiny, data, root / "out", root / "logs", "ppo_test"),
        n_agent=2,
        batch_size=4,
        ppo_epochs=2,
        max_steps=3,
        learning_rate=1e-3,
        critic_lr=1e-2,
        critic_trunk_lr=1e-3,
        progress=False,
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=12, max_completion_tokens=64, obs_max_tokens=12
        ),
        rewards=RewardOverrides(reward="ddai-phase1"),
    )
    result = ppo.run_ppo(cfg, toy.local_backends(toy.corpus()))
    assert result.steps == 3 and result.rollouts_logged == 12
    assert result.changed_parameters > 0
    metrics = [
        json.loads(line) for line in (root / "out" / "metrics.jsonl").read_text().splitlines()
    ]
    vf = [m["critic/vf_loss"] for m in metrics]
    assert len(vf) == 3 and vf[-1] < vf[0]
    assert all(
        k in metrics[0] for k in ("actor/pg_loss", "actor/clip_frac", "ppo/kl", "ppo/returns_mean")
    )
    assert metrics[0]["ppo/kl"] == pytest.approx(
        0.0, abs=1e-6
    )  # the first batch: policy = reference
    rows = read_rollouts(root / "logs", ["ppo_test"]).to_pylist()
    assert len(rows) == 12 and {r["step"] for r in rows} == {1, 2, 3}
    assert all(r["advantage"] is not None and r["reward"] is not None for r in rows)
    # the share of (step, prompt) groups with reward variance, as train grpo reports it
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["step"], r["uid"]), []).append(r["reward"])
    assert len(groups) == 6
    mixed = sum(max(g) - min(g) > 1e-12 for g in groups.values())
    assert result.informative_group_share == pytest.approx(mixed / 6)
    critic, _ = value_model.load_value_model(result.critic_dir)
    assert critic.head_type == "linear" and critic.unfreeze == 2
    assert (root / "out" / "model.safetensors").is_file()


def test_ppo_bad_flags_exit_2(toy_world, tmp_path):
    _, data, tiny = toy_world
    base = ["train", "ppo", "--model", str(tiny), "--data", str(data / "dataset.parquet")]
    base += ["--corpus", str(data / "pages.parquet"), "--out", str(tmp_path / "o")]
    for extra, message in (
        (["--batch-size", "5", "--n-agent", "2"], "multiple of --n-agent"),
        (["--kl-estimator", "k9"], "k1, k2, k3"),
        (["--lam", "1.5"], "--gamma and --lam"),
        (["--vf-clip", "-1"], "--vf-clip"),
        (["--mini-batch-size", "99"], "--mini-batch-size"),
        (["--kl-mode", "both"], "--kl-mode"),
        (["--reward-norm", "minmax"], "none, center, scale, whiten"),
        (["--entropy-coef", "-1"], "--entropy-coef"),
    ):
        res = runner.invoke(app, base + extra)
        assert res.exit_code == 2, res.output
        assert message in said(res)


def test_critic_from_a_value_checkpoint_must_share_the_policy_tokenizer(toy_world, tmp_path):
    from ddai.trainer.common import TrainConfigError
    from ddai.trainer.modeling import load_tokenizer
    from ddai.trainer.value.model import new_value_model, save_value_model

    _, _, tiny = toy_world
    model, tok = new_value_model(str(tiny), head_type="mlp", unfreeze=0)
    ckpt = save_value_model(model, tok, tmp_path / "v", source=str(tiny))
    cfg = ppo.PPORunConfig(
        model=str(tiny), data="d", corpus="c", output_dir="o", critic=str(ckpt), critic_unfreeze=1
    )
    critic, source = ppo._load_critic(cfg, load_tokenizer(str(tiny)))
    assert critic.head_type == "mlp" and critic.unfreeze == 1 and source == str(ckpt)
    other = build_tiny(
        tmp_path / "other", texts=["a different corpus of words"], spec=TinySpec(hidden_size=32)
    )
    with pytest.raises(TrainConfigError, match="another tokenizer"):
        ppo._load_critic(cfg, load_tokenizer(str(other)))


def test_critic_unfreeze_past_the_trunk_names_the_ppo_flag(toy_world, tmp_path):
    # the error named --unfreeze, a flag `train ppo` does not have; it is --critic-unfreeze here
    from ddai.trainer.common import TrainConfigError
    from ddai.trainer.modeling import load_tokenizer
    from ddai.trainer.value.model import new_value_model, save_value_model

    _, _, tiny = toy_world
    model, tok = new_value_model(str(tiny), head_type="linear", unfreeze=0)
    ckpt = save_value_model(model, tok, tmp_path / "v", source=str(tiny))
    for critic in (None, str(ckpt)):  # a fresh critic, then a checkpoint
        cfg = ppo.PPORunConfig(
            model=str(tiny), data="d", corpus="c", output_dir="o", critic=critic, critic_unfreeze=9
        )
        with pytest.raises(TrainConfigError, match=r"^--critic-unfreeze 9: the trunk has 2 layers"):
            ppo._load_critic(cfg, load_tokenizer(str(tiny)))


def test_critic_head_that_differs_from_the_checkpoints_is_refused(toy_world, tmp_path):
    # --critic-head mlp with a linear --critic was accepted and ignored (the critic stayed linear)
    from ddai.trainer.common import TrainConfigError
    from ddai.trainer.modeling import load_tokenizer
    from ddai.trainer.value.model import new_value_model, save_value_model

    _, _, tiny = toy_world
    model, tok = new_value_model(str(tiny), head_type="linear", unfreeze=0)
    ckpt = save_value_model(model, tok, tmp_path / "v", source=str(tiny))
    common = {"model": str(tiny), "data": "d", "corpus": "c", "output_dir": "o"}
    cfg = ppo.PPORunConfig(**common, critic=str(ckpt), critic_head="mlp")
    with pytest.raises(TrainConfigError, match=r"--critic-head mlp: .* holds a linear head"):
        ppo._load_critic(cfg, load_tokenizer(str(tiny)))
    for head in (None, "linear"):  # not given, or the checkpoint's own: the checkpoint's head
        cfg = ppo.PPORunConfig(**common, critic=str(ckpt), critic_head=head)
        assert ppo._load_critic(cfg, load_tokenizer(str(tiny)))[0].head_type == "linear"
    fresh = ppo.PPORunConfig(**common)  # a fresh critic is linear unless --critic-head says
    assert ppo._load_critic(fresh, load_tokenizer(str(tiny)))[0].head_type == "linear"
