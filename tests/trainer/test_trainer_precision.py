"""Memory and precision for real models: LoRA GRPO/PPO runs change only adapter weights, a bf16
LoRA run at DDAI's lr 1e-6 still changes weights, pure bf16 weights at that lr are refused with
the reason, and the changed-parameter count hashes tensors instead of cloning the model."""

from __future__ import annotations

import pytest
from support.backends import toy_backends
from support.lazy import torch
from support.toy_world import make_world, run_args, run_fields

from ddai.trainer import modeling, toy
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.grpo.train import GRPORunConfig, grpo_args, run_grpo
from ddai.trainer.modeling import (
    changed_parameters,
    check_update_precision,
    lost_update_share,
    parameter_snapshot,
)


def _linear(values, dtype):
    lin = torch.nn.Linear(len(values), 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([values]))
    return lin.to(dtype)


def test_lost_update_share_by_hand_and_against_adamw():
    # bf16 spacing for w in [2^e, 2^(e+1)) is 2^e * 2^-7; a step under half of it rounds away.
    # lr 1e-3: w=1.5 (half-spacing 2^-8 = 3.9e-3) and w=0.75 (1.95e-3) are stuck; w=1.5 * 2^-10
    # (half-spacing 3.8e-6) and w=0 move. (No power of two: below one the spacing halves.)
    values = [1.5, 0.75, 1.5 * 2.0**-10, 0.0]
    lin = _linear(values, torch.bfloat16)
    assert lost_update_share(lin, 1e-3) == pytest.approx(0.5)
    assert lost_update_share(_linear(values, torch.float32), 1e-3) == 0.0
    # What AdamW does to those weights (first step moves each by lr, whatever the gradient's size).
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, weight_decay=0.0)
    lin(torch.ones(1, 4, dtype=torch.bfloat16)).sum().backward()
    before = lin.weight.detach().clone()
    opt.step()
    moved = (lin.weight.detach() != before)[0].tolist()
    assert moved == [False, False, True, True]


def test_pure_bf16_at_ddai_lr_is_refused_with_the_reason():
    lin = _linear([0.02, -0.03, 0.05, 0.01], torch.bfloat16)  # typical weight magnitudes
    with pytest.raises(TrainConfigError, match=r"--lr 1e-06: 100% .*--lora"):
        check_update_precision(lin, 1e-6)
    assert check_update_precision(lin, 1e-2) == 0.0
    assert check_update_precision(lin.float(), 1e-6) == 0.0


def test_digest_snapshot_sees_a_one_ulp_change_and_clones_nothing():
    lin = _linear([0.25, 0.5], torch.bfloat16)
    before = parameter_snapshot(lin)
    assert all(isinstance(v, str) for v in before.values())  # digests, not tensors
    assert changed_parameters(before, lin) == []
    with torch.no_grad():
        lin.weight[0, 1] += 2.0**-8  # one bf16 step (ulp) at 0.5
    assert lin.weight[0, 1].item() == 0.5 + 2.0**-8
    assert changed_parameters(before, lin) == ["weight"]


def test_training_passes_checkpoint_activations_by_default(tmp_path):
    args = grpo_args(GRPORunConfig(model="m", data=tmp_path, corpus=tmp_path, output_dir=tmp_path))
    assert args.activation_checkpointing is True
    for key in ("gradient_checkpointing", "activation_checkpointing"):  # old and new name
        off = GRPORunConfig(
            model="m", data=tmp_path, corpus=tmp_path, output_dir=tmp_path, overrides={key: False}
        )
        assert grpo_args(off).activation_checkpointing is False


def test_sft_checkpoints_activations_under_the_new_name_without_a_warning(tmp_path):
    import warnings

    from ddai.trainer.sft.train import SFTRunConfig, sft_args

    with warnings.catch_warnings():
        # TRL's gradient_checkpointing=True default made transformers warn on every SFT run
        warnings.simplefilter("error", FutureWarning)
        args = sft_args(SFTRunConfig(model="m", data=[], output_dir=tmp_path))
    assert args.activation_checkpointing is True
    for key in ("gradient_checkpointing", "activation_checkpointing"):  # old and new name
        off = SFTRunConfig(model="m", data=[], output_dir=tmp_path, overrides={key: False})
        assert sft_args(off).activation_checkpointing is False


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("prec"), hidden_size=32)


# What the GRPO and PPO runs share: 2 steps of 4 rollouts, 2 a prompt, on a short episode.
RUN = dict(
    n_agent=2,
    batch_size=4,
    max_steps=2,
    skip_preflight=True,
    episode=EpisodeConfig(
        max_turns=2, max_turn_tokens=12, max_completion_tokens=64, obs_max_tokens=12
    ),
)


def _grpo(world, name, **kw):
    root, data, tiny = world

    backends = toy_backends()
    cfg = GRPORunConfig(
        **run_fields(tiny, data, root / name, root / "logs", name),
        **RUN,
        **kw,
        rewards=RewardOverrides(reward="judge-only"),
    )
    return run_grpo(cfg, backends)


@pytest.mark.slow
def test_lora_bf16_grpo_at_ddai_lr_changes_only_adapter_weights(world, monkeypatch):
    # Hash every parameter (frozen ones too) to show that none but the adapter's changed.
    seen: dict[str, list[str]] = {}
    real_changed = modeling.changed_parameters
    monkeypatch.setattr(
        modeling, "parameter_snapshot", lambda m: parameter_snapshot(m, trainable_only=False)
    )

    def spy(before, model):
        seen["names"] = real_changed(before, model)
        seen["all"] = list(before)
        return seen["names"]

    monkeypatch.setattr(modeling, "changed_parameters", spy)
    result = _grpo(world, "lora", lora=True, lora_r=4, dtype="bfloat16", learning_rate=1e-6)
    assert result.steps == 2 and result.changed_parameters == len(seen["names"]) > 0
    assert all("lora_" in n for n in seen["names"])
    assert any("lora_" not in n for n in seen["all"])  # the frozen base was hashed too
    root = world[0]
    assert (root / "lora" / "adapter" / "adapter_config.json").is_file()
    assert (root / "lora" / "model.safetensors").is_file()  # merged model


def test_cli_pure_bf16_grpo_at_ddai_lr_exits_2_with_the_reason(world):
    from typer.testing import CliRunner

    from ddai.cli.app import app

    root, data, tiny = world
    res = CliRunner().invoke(
        app,
        [
            "train",
            "grpo",
            *run_args(tiny, data / "dataset.parquet", data / "pages.parquet"),
            "--out",
            str(root / "bf16"),
            "--preset",
            "gspo-ddai",
            "--dtype",
            "bfloat16",
            "--skip-preflight",
        ],
    )
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "--lr 1e-06" in text and "bfloat16 keeps 8 significant bits" in text and "--lora" in text
    assert not (root / "bf16" / "checkpoint-1").exists()


@pytest.mark.slow
def test_lora_ppo_changes_only_adapter_weights(world, monkeypatch):
    from ddai.trainer.ppo.train import PPORunConfig, run_ppo

    root, data, tiny = world
    seen: dict[str, list[str]] = {}
    real_changed = modeling.changed_parameters
    monkeypatch.setattr(
        modeling, "parameter_snapshot", lambda m: parameter_snapshot(m, trainable_only=False)
    )
    monkeypatch.setattr(
        modeling,
        "changed_parameters",
        lambda b, m: seen.setdefault("names", real_changed(b, m)),
    )
    cfg = PPORunConfig(
        **run_fields(tiny, data, root / "ppo", root / "logs", "ppo_lora"),
        **RUN,
        ppo_epochs=1,
        learning_rate=1e-3,
        kl_coef=0.05,
        lora=True,
        lora_r=4,
        progress=False,
        rewards=RewardOverrides(reward="ddai-phase1"),
    )
    result = run_ppo(cfg, toy.local_backends(toy.corpus()))
    assert result.changed_parameters == len(seen["names"]) > 0
    assert all("lora_" in n for n in seen["names"])
    assert (root / "ppo" / "adapter" / "adapter_config.json").is_file()


def test_ppo_policy_trains_with_checkpointing_and_without_dropout(world):
    from ddai.trainer.modeling import load_policy
    from ddai.trainer.ppo.train import PPORunConfig, prepare_policy

    root, data, tiny = world
    model, _ = load_policy(str(tiny))
    for m in model.modules():
        if hasattr(m, "attention_dropout"):
            m.attention_dropout = 0.3
    cfg = PPORunConfig(model=str(tiny), data=data, corpus=data, output_dir=root, kl_coef=0.1)
    policy, ref = prepare_policy(model, cfg)
    assert policy.training and policy.is_activation_checkpointing
    # Seed 003: no dropout in any pass, though the policy is in train mode.
    assert all(
        m.attention_dropout == 0.0 for m in policy.modules() if hasattr(m, "attention_dropout")
    )
    assert ref is not None and not any(p.requires_grad for p in ref.parameters())
    with pytest.raises(TrainConfigError, match="--lora"):
        prepare_policy(load_policy(str(tiny), dtype="bfloat16")[0], cfg)  # lr 1e-6 in bf16
