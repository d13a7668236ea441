"""The final model of a LoRA run is the trained model: ``train grpo``, ``train sft`` and
``train ppo`` with ``--lora`` on bfloat16 weights at DDAI's lr 1e-6 write a folder whose logits
equal the in-memory trained model's (the adapter on its base) within 1e-3, and which carries the
update itself, not only something within 1e-3 of it.

Before: each merged the adapter into the bfloat16 weights (peft's ``merge_and_unload``) and saved
that: an update this small is under half a bfloat16 spacing for most weights, so the saved model
reproduced about a tenth of what training changed in the logits (its logits were still within
1e-3, because the whole update moves them by ~5e-5 here: the absolute check alone is blind to it).
"""

from __future__ import annotations

import types

import pytest
from cli_schemas import check
from support.backends import toy_backends
from support.lazy import heavy, torch
from support.toy_world import make_world, run_fields

from ddai.cli.common import json_shape
from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

lora_reference = heavy("support.lora_reference")

pytestmark = pytest.mark.slow

LR = 1e-6
EPISODE = EpisodeConfig(
    max_turns=2, max_turn_tokens=12, max_completion_tokens=64, obs_max_tokens=12
)
# What the GRPO and PPO runs share: a LoRA policy trained in bfloat16 at DDAI's lr.
LORA_RUN = dict(
    n_agent=2,
    batch_size=4,
    max_steps=2,
    learning_rate=LR,
    lora=True,
    lora_r=4,
    dtype="bfloat16",
    progress=False,
    skip_preflight=True,
    episode=EPISODE,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("lora_final"), hidden_size=32)


def _assert_reproduces(result, captured, tiny, out):
    cmp = lora_reference.compare_final(captured, tiny, "bfloat16", out)
    assert cmp.update_max_abs > 0  # training moved the logits
    assert cmp.max_abs_diff <= 1e-3
    # the saved weights carry the update (bfloat16 merge before: errors of 0.9 and more)
    assert cmp.weight_update_error < 1e-2
    assert cmp.logit_update_error < 1e-2
    final = types.SimpleNamespace(**result.final_model)
    assert final.artifact == "merged" and final.dtype == "float32"
    assert final.run_dtype == "bfloat16"
    assert final.max_abs_logit_diff <= final.tolerance == 1e-3
    # what a bfloat16 save would have kept, and what the float32 one keeps
    assert final.run_dtype_update_kept < 0.5 < 0.99 < final.update_kept
    assert final.run_dtype_changed_weights < final.changed_weights <= final.update_weights
    return cmp


def _grpo_cfg(world, name, max_steps):
    from ddai.trainer.grpo.train import GRPORunConfig

    root, data, tiny = world
    return GRPORunConfig(
        **run_fields(tiny, data, root / name, root / "logs", name),
        **(LORA_RUN | {"max_steps": max_steps}),
        rewards=RewardOverrides(reward="judge-only"),
    )


def _grpo_backends():

    return toy_backends()


def test_grpo_lora_bf16_at_ddai_lr_saves_the_trained_model(world, monkeypatch):
    from ddai.trainer.grpo.train import run_grpo

    tiny = world[2]
    captured = lora_reference.capture_trained(monkeypatch)
    cfg = _grpo_cfg(world, "grpo_lora_final", 2)
    result = run_grpo(cfg, _grpo_backends())
    assert result.steps == 2
    _assert_reproduces(result, captured, tiny, cfg.output_dir)
    check("train-grpo", json_shape(_asdict(result)))


def test_grpo_adapter_is_float32_on_trls_zero3_path(world, monkeypatch):
    """TRL builds the adapter with ``autocast_adapter_dtype=False`` under ZeRO-3 (DeepSpeed is not
    installed here: its ``get_peft_model`` call is made as that branch makes it)."""
    from trl.trainer import grpo_trainer

    from ddai.trainer.grpo.train import run_grpo

    real = grpo_trainer.get_peft_model
    seen = {}

    def as_under_zero3(model, config, **kw):
        seen["kwargs"] = kw
        return real(model, config, **{**kw, "autocast_adapter_dtype": False})

    monkeypatch.setattr(grpo_trainer, "get_peft_model", as_under_zero3)
    captured = lora_reference.capture_trained(monkeypatch)
    result = run_grpo(_grpo_cfg(world, "grpo_lora_zero3", 1), _grpo_backends())
    assert seen["kwargs"] == {}  # not ZeRO-3 here: TRL would have passed False itself
    adapter = {k: v.dtype for k, v in captured["state"].items() if "lora_" in k}
    assert adapter and set(adapter.values()) == {torch.float32}
    assert result.final_model["update_kept"] > 0.99


def test_sft_lora_bf16_at_ddai_lr_saves_the_trained_model(world, monkeypatch):
    from trl import SFTTrainer

    from ddai.trainer.sft.train import SFTRunConfig, run_sft

    root, data, tiny = world
    captured = lora_reference.capture_after_train(monkeypatch, SFTTrainer)
    out = root / "sft"
    cfg = SFTRunConfig(
        model=str(tiny),
        data=[data / "sft.parquet"],
        output_dir=out,
        max_steps=2,
        learning_rate=LR,
        batch_size=4,
        max_length=256,
        lora=True,
        lora_r=4,
        lora_dropout=0.0,
        dtype="bfloat16",
        report_to="none",
        progress=False,
    )
    result = run_sft(cfg)
    assert result.steps == 2
    _assert_reproduces(result, captured, tiny, out)
    check("train-sft", json_shape(_asdict(result)))


def test_ppo_lora_bf16_at_ddai_lr_saves_the_trained_model(world, monkeypatch):
    from ddai.trainer.ppo.train import PPORunConfig, run_ppo

    root, data, tiny = world
    captured = lora_reference.capture_trained(monkeypatch)
    out = root / "ppo"
    cfg = PPORunConfig(
        **run_fields(tiny, data, out, root / "logs", "ppo_lora_final"),
        **LORA_RUN,
        ppo_epochs=1,
        rewards=RewardOverrides(reward="ddai-phase1"),
    )
    result = run_ppo(cfg, toy.local_backends(toy.corpus()))
    _assert_reproduces(result, captured, tiny, out)
    check("train-ppo", json_shape(_asdict(result)))


def _asdict(result):
    from dataclasses import asdict

    return asdict(result)
