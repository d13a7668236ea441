"""The pointer configs (``ddai.trainer.pointer.config``): the phase plan and its optimiser
defaults, model specs, and the checks the library makes for the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.lazy import heavy

from ddai.trainer.pointer.config import (
    NORMALIZERS,
    RCE_EPOCHS,
    RL_EPOCHS,
    RL_OPTIM,
    SFT_EPOCHS,
    SFT_OPTIM,
    PointerTrainConfig,
    RLConfig,
    TrainSchedule,
    parse_models,
    parse_phases,
)

losses = heavy("ddai.trainer.pointer.losses")


def test_a_mode_without_epochs_gets_its_phase_default():
    assert TrainSchedule(mode="sft").plan() == (("sft", SFT_EPOCHS),) == (("sft", 20),)
    assert TrainSchedule(mode="clipped-group").plan() == (("clipped-group", RL_EPOCHS),)
    assert RL_EPOCHS == 30
    assert TrainSchedule(mode="rce", epochs=5).plan() == (("rce", 5),)
    # seed 002 §4.3: the RCE warm-up runs rce_epochs = 1~2, not the RL phases' 30
    assert TrainSchedule(mode="rce").plan() == (("rce", RCE_EPOCHS),) == (("rce", 2),)
    assert TrainSchedule(phases="rce:2,clipped-group:30").plan() == (
        ("rce", 2),
        ("clipped-group", 30),
    )


@pytest.mark.parametrize(("mode", "phases"), [(None, None), ("sft", "rce:1")])
def test_exactly_one_of_mode_and_phases(mode, phases):
    with pytest.raises(ValueError, match="exactly one of --mode"):
        TrainSchedule(mode=mode, phases=phases).plan()


def test_the_optimiser_defaults_follow_the_first_phase_and_given_values_win():
    sft, rl = (
        TrainSchedule().optim((("sft", 1),)),
        TrainSchedule(seed=3).optim((("rce", 1), ("clipped-group", 2))),
    )
    assert (sft.lr, sft.batch_queries, sft.weight_decay) == (3e-3, 32, 0.0)
    assert (rl.lr, rl.batch_queries, rl.weight_decay, rl.seed) == (1e-3, 8, 1e-2, 3)
    assert (SFT_OPTIM.lr, RL_OPTIM.lr) == (sft.lr, rl.lr)
    mixed = TrainSchedule(lr=5e-4, weight_decay=0.0).optim((("clipped-group", 1),))
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


def test_grpo_is_read_as_clipped_group_with_a_one_line_note(capsys):
    """The pointer's clipped group advantage was called "grpo" (seed 002), the Searcher's GRPO's
    name: the old name still reads for one release, with a note on stderr."""
    assert parse_phases("rce:1,grpo:3") == [("rce", 1), ("clipped-group", 3)]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'grpo' is now 'clipped-group'" in err
    assert TrainSchedule(mode="grpo").plan() == (("clipped-group", RL_EPOCHS),)
    assert capsys.readouterr().err.count("'grpo' is now") == 1  # once, not once per parse
    cfg = PointerTrainConfig(store=Path("s"), out=Path("o"), phases=(("grpo", 2),))
    assert cfg.phases == (("clipped-group", 2),)  # a config built in code reads it too
    assert "'grpo' is now" in capsys.readouterr().err
    assert parse_phases("clipped-group:2,reinforcepp:1") == [
        ("clipped-group", 2),
        ("reinforcepp", 1),
    ]
    assert capsys.readouterr().err == ""


def test_schedule_help_says_the_phase_defaults_it_leaves_to_its_optim():
    """The optimiser and epoch flags' docstrings write the phase defaults out: they must be
    ``SFT_OPTIM``'s, ``RL_OPTIM``'s and the epochs of a bare ``--mode``."""
    from ddai.cli.fields import field_docs

    docs = field_docs(TrainSchedule)
    for name in ("lr", "batch_queries", "weight_decay"):
        said = f"Default: sft {getattr(SFT_OPTIM, name):g}, RL {getattr(RL_OPTIM, name):g}."
        assert docs[name].endswith(said), name
    assert docs["epochs"].endswith(
        f"(default: sft {SFT_EPOCHS}, rce {RCE_EPOCHS}, other RL {RL_EPOCHS})."
    )
    plan = TrainSchedule(mode="sft")
    assert plan.optim(plan.plan()) == SFT_OPTIM


def _rl_cfg(phases: str, **rl) -> PointerTrainConfig:
    return PointerTrainConfig(
        store=Path("s"), out=Path("o"), data=Path("d"), init=Path("m"),
        phases=tuple(parse_phases(phases)), rl=RLConfig(**rl),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("phases", "rl"),
    [
        ("rce:1,clipped-group:2", {"rce_t_start": 3.0, "clip_eps": 0.1, "old_logp": "stored"}),
        ("reinforcepp", {"clip_eps": 0.1, "kl_coef": 0.1, "adv_clip": 2.0, "norm": "minmax"}),
        ("reinforcepp", {"reinforcepp_clip": False, "adv_clip": 2.0}),
        ("rce:1,reinforcepp:1", {"reinforcepp_clip": False, "rce_t_end": 0.1}),
    ],
)
def test_rl_settings_a_chosen_phase_reads_are_accepted(phases, rl):
    _rl_cfg(phases, **rl).check()


def test_every_rl_setting_is_read_by_some_phase_and_every_rl_phase_is_in_the_table():
    from dataclasses import fields

    from ddai.trainer.pointer.config import PHASE_READS, RL_MODES

    assert set(PHASE_READS) == set(RL_MODES)
    assert {n for reads in PHASE_READS.values() for n in reads} == {
        f.name for f in fields(RLConfig)
    }
