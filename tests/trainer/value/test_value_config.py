"""The value commands' configs (``ddai.trainer.value.config``): one definition of each shared
field, each command's own defaults, and the checks the library makes before loading a model."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from ddai.trainer.value.config import (
    TDWeightConfig,
    ValueFitConfig,
    ValueRowsConfig,
    ValueScoreConfig,
    ValueSFTConfig,
    ValueTrainConfig,
)


def _own_fields(cls: type) -> set[str]:
    """Fields ``cls`` declares itself (its annotations), not inherited ones."""
    return set(inspect.get_annotations(cls))


def test_shared_fields_are_declared_once_in_the_bases():
    fit = {f.name for f in dataclasses.fields(ValueFitConfig)}
    assert {"trunk_lr", "pairwise_coef", "bin_edges", "grad_accum", "max_length"} <= fit
    # the two trainings restate nothing of the base but the seed value-sft documents and the
    # split, whose defaults there are the critic's recorded one
    assert _own_fields(ValueTrainConfig) & fit == set()
    assert _own_fields(ValueSFTConfig) & fit == {"seed", "val_fraction", "split_seed"}
    assert _own_fields(ValueScoreConfig) & {f.name for f in dataclasses.fields(ValueRowsConfig)} == set()  # fmt: skip


def test_value_sft_takes_the_td_weight_fields_and_defaults_from_one_definition():
    sft = ValueSFTConfig(model="m", critic="c", output_dir="o")
    names = [f.name for f in dataclasses.fields(TDWeightConfig)]
    assert set(names) <= _own_fields(ValueSFTConfig)  # every weight setting has its flag
    assert sft.weights_cfg == TDWeightConfig()  # seed 004's β 1, clip [0.1, 2], γ 1, λ 1
    changed = {n: getattr(TDWeightConfig(), n) / 2 for n in names}
    assert ValueSFTConfig(model="m", critic="c", output_dir="o", **changed).weights_cfg == (
        TDWeightConfig(**changed)
    )


def test_each_command_keeps_its_defaults():
    train = ValueTrainConfig(model="m", output_dir="o")
    sft = ValueSFTConfig(model="m", critic="c", output_dir="o")
    score = ValueScoreConfig(checkpoint="c")
    assert (train.seed, sft.seed) == (0, 42)  # seed 004's data_sampling.seed for the joint stage
    assert (train.split_seed, sft.split_seed) == (0, None)  # None: the critic's split
    assert (train.grad_clip, sft.max_grad_norm) == (1.0, 0.5)
    assert (train.batch_size, sft.batch_size, score.batch_size) == (8, 8, 16)
    assert (train.max_length, sft.max_length, score.max_length) == (2048, 2048, 2048)


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"data": "missing.parquet"}, "--data missing.parquet"),
        ({"system_prompt": "missing.txt"}, "--system-prompt missing.txt"),
        ({"target": "nope"}, "--target 'nope'"),
        ({"pairwise_coef": 0.0, "mc_coef": 0.0}, "not both 0"),
        ({"val_fraction": 1.0}, "--val-fraction"),
        ({"grad_accum": 0}, "--grad-accum must be >= 1"),
        ({"max_length": 0}, "--max-length must be >= 1"),
        ({"bin_edges": [0.5], "bin_weights": [1.0]}, "--bin-weights needs one weight per bin"),
        ({"head": "cnn"}, "--head 'cnn'"),
        ({"unfreeze": -1}, "--unfreeze -1"),
    ],
)
def test_train_value_refuses_bad_settings_before_loading(over, match, tmp_path):
    from ddai.trainer.value.train import train_value

    cfg = ValueTrainConfig(model=str(tmp_path / "no-model"), output_dir=tmp_path / "o", **over)
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        train_value(cfg)
    assert not (tmp_path / "o").exists()


def test_value_sft_refuses_a_negative_value_loss_coef_and_bad_weights(tmp_path):
    from ddai.trainer.value.sft import train_value_sft

    base = {"model": "m", "critic": "c", "output_dir": tmp_path / "o"}
    with pytest.raises(ValueError, match="--value-loss-coef"):
        train_value_sft(ValueSFTConfig(**base, value_loss_coef=-1.0))
    with pytest.raises(ValueError, match="--beta"):
        train_value_sft(ValueSFTConfig(**base, beta=0.0))


def test_value_score_refuses_a_missing_checkpoint_on_the_library_entry(tmp_path):
    from ddai.trainer.value.score import score_runs

    with pytest.raises(FileNotFoundError, match=r"--checkpoint .* not found; train one"):
        score_runs(ValueScoreConfig(checkpoint=tmp_path / "none", logs=tmp_path))


def test_seed_004_mc_hybrid_defaults():
    """Seed 004's ``verifiable_mc_hybrid.yaml``, value by value, where ddai takes it over: the
    value head (``type: linear``, ``num_unfrozen_layers: 2``), the learning rates, the hybrid's
    coefficients (``pairwise_coef: 1.0``, ``mc_mse_coef: 0.5``), ``value_loss_coef: 0.05``,
    ``max_grad_norm: 0.5``, ``data_sampling.seed: 42``, ``max_pairs_per_problem: 25`` and the
    TD weights (β 1, clip [0.1, 2], γ = λ = 1: Monte Carlo)."""
    from ddai.trainer.ppo.config import PPORunConfig
    from ddai.trainer.value.model import new_value_model

    train = ValueTrainConfig(model="m", output_dir="o")
    sft = ValueSFTConfig(model="m", critic="c", output_dir="o")
    for cfg in (train, sft):
        assert (cfg.trunk_lr, cfg.head_lr) == (1e-5, 1e-4)
        assert (cfg.pairwise_coef, cfg.mc_coef) == (1.0, 0.5)
        assert cfg.max_pairs_per_problem == 25
        assert cfg.target == "success"  # terminal reward: correct 1, incorrect 0
    assert (sft.value_loss_coef, sft.max_grad_norm, sft.seed) == (0.05, 0.5, 42)
    assert (sft.beta, sft.weight_clip_min, sft.weight_clip_max, sft.gamma, sft.lam) == (
        1.0, 0.1, 2.0, 1.0, 1.0,
    )  # fmt: skip
    assert sft.value_trunk_grad  # num_unfrozen_layers 2 > 0: the value loss reaches the trunk
    # The head: `train value` without --head makes a linear one on 2 unfrozen layers, as does a
    # fresh PPO critic.
    assert (train.head, train.unfreeze) == (None, None)  # None: linear on 2, or the checkpoint's
    params = inspect.signature(new_value_model).parameters
    assert (params["head_type"].default, params["unfreeze"].default) == ("linear", 2)
    ppo = PPORunConfig(model="m", output_dir="o", data="d", corpus="c")
    assert (ppo.critic_head, ppo.critic_unfreeze) == (None, None)  # None: linear, 2 when fresh
