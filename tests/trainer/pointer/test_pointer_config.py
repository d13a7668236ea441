"""The pointer configs (``ddai.trainer.pointer.config``): the phase plan and its optimiser
defaults, model specs, and the checks the library makes for the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.lazy import heavy

from ddai.trainer.pointer.config import (
    NORMALIZERS,
    RL_EPOCHS,
    RL_OPTIM,
    SFT_EPOCHS,
    SFT_OPTIM,
    RLConfig,
    optim_for,
    parse_models,
    plan_phases,
)

losses = heavy("ddai.trainer.pointer.losses")


def test_a_mode_without_epochs_gets_its_phase_default():
    assert plan_phases("sft", None, None) == (("sft", SFT_EPOCHS),) == (("sft", 20),)
    assert plan_phases("grpo", None, None) == (("grpo", RL_EPOCHS),) == (("grpo", 30),)
    assert plan_phases("rce", 2, None) == (("rce", 2),)
    assert plan_phases(None, None, "rce:3,grpo:30") == (("rce", 3), ("grpo", 30))


@pytest.mark.parametrize(("mode", "phases"), [(None, None), ("sft", "rce:1")])
def test_exactly_one_of_mode_and_phases(mode, phases):
    with pytest.raises(ValueError, match="exactly one of --mode"):
        plan_phases(mode, None, phases)


def test_the_optimiser_defaults_follow_the_first_phase_and_given_values_win():
    sft, rl = optim_for((("sft", 1),)), optim_for((("rce", 1), ("grpo", 2)), seed=3)
    assert (sft.lr, sft.batch_queries, sft.weight_decay) == (3e-3, 32, 0.0)
    assert (rl.lr, rl.batch_queries, rl.weight_decay, rl.seed) == (1e-3, 8, 1e-2, 3)
    assert (SFT_OPTIM.lr, RL_OPTIM.lr) == (sft.lr, rl.lr)
    mixed = optim_for((("grpo", 1),), lr=5e-4, weight_decay=0.0)
    assert (mixed.lr, mixed.weight_decay, mixed.batch_queries) == (5e-4, 0.0, 8)


def test_model_specs_are_name_equals_checkpoint():
    assert parse_models(["sft=runs/a", "rl=b"]) == (("sft", Path("runs/a")), ("rl", Path("b")))
    for bad in ("runs/a", "=x", "sft="):
        with pytest.raises(ValueError, match="write NAME=CHECKPOINT"):
            parse_models([bad])


def test_the_config_names_every_normalizer_the_losses_implement():
    assert tuple(losses.NORMALIZERS) == NORMALIZERS
    with pytest.raises(ValueError, match="unknown normalization 'rank'"):
        RLConfig(norm="rank")
