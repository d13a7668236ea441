"""TRL config assembly: presets, config files, flags and --set, and their errors; the CLI's exits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from cli_schemas import check
from support.toy_world import tiny_on_toy
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.trainer.common import TrainConfigError, jsonable, parse_set, split_report_to
from ddai.trainer.episode.config import RewardOverrides
from ddai.trainer.grpo.config import GRPORunConfig, grpo_args
from ddai.trainer.sft.train import SFTRunConfig, sft_args

reward_spec = RewardOverrides.reward_spec


def _cfg(tmp_path: Path, **kw) -> GRPORunConfig:
    return GRPORunConfig(
        model="m", data=tmp_path / "d.parquet", corpus=tmp_path, output_dir=tmp_path / "o", **kw
    )


def test_gspo_ddai_preset_sets_seed_defaults(tmp_path):
    args = grpo_args(_cfg(tmp_path, preset="gspo-ddai"))
    assert args.importance_sampling_level == "sequence" and args.loss_type == "grpo"
    assert (args.epsilon, args.epsilon_high, args.learning_rate) == (3e-4, 4e-4, 1e-6)
    assert args.beta == 0.0 and args.entropy_coef == 0.0
    # Seed 000's mini-batch structure: two optimizer steps per rollout batch, so old log-probs
    # differ from the current ones on the second and the 3e-4/4e-4 clip can act.
    assert args.steps_per_generation == 2
    assert args.generation_batch_size == 2 * args.per_device_train_batch_size


def test_gspo_ddai_structure_yields_to_a_given_generation_batch(tmp_path):
    args = grpo_args(
        _cfg(tmp_path, preset="gspo-ddai", batch_size=8, overrides={"generation_batch_size": 32})
    )
    assert args.generation_batch_size == 32 and args.steps_per_generation == 4
    four = grpo_args(_cfg(tmp_path, preset="gspo-ddai", overrides={"steps_per_generation": 4}))
    assert four.steps_per_generation == 4


def test_precedence_preset_file_flag_set(tmp_path):
    (tmp_path / "c.toml").write_text(
        "learning_rate = 2e-6\nweight_decay = 0.1\n[trl]\nepsilon = 0.01\n"
    )
    cfg = _cfg(
        tmp_path,
        preset="gspo-ddai",
        config_file=tmp_path / "c.toml",
        epsilon=0.02,
        overrides={"epsilon_high": 0.5, "weight_decay": 0.2},
    )
    args = grpo_args(cfg)
    assert args.learning_rate == 2e-6  # file over preset
    assert args.epsilon == 0.02  # flag over file
    assert args.epsilon_high == 0.5 and args.weight_decay == 0.2  # --set over everything


def test_yaml_config_and_unknown_keys(tmp_path):
    (tmp_path / "c.yaml").write_text("num_generations: 2\nper_device_train_batch_size: 6\n")
    args = grpo_args(_cfg(tmp_path, config_file=tmp_path / "c.yaml"))
    assert args.num_generations == 2 and args.per_device_train_batch_size == 6
    with pytest.raises(TrainConfigError, match="did you mean learning_rate"):
        grpo_args(_cfg(tmp_path, overrides={"learning_rat": 1.0}))
    with pytest.raises(TrainConfigError, match="multiple of --n-agent"):
        grpo_args(_cfg(tmp_path, n_agent=3, batch_size=8))
    with pytest.raises(TrainConfigError, match="gspo-ddai"):
        grpo_args(_cfg(tmp_path, preset="ppo"))


def test_reward_flags_override_preset(tmp_path):
    rewards = RewardOverrides(reward="ddai-phase1", gate=False, w_judge=0.5)
    spec = reward_spec(_cfg(tmp_path, rewards=rewards).rewards)
    assert (spec.bias, spec.w_ndcg, spec.w_judge, spec.gate) == (0.1, 0.9, 0.5, False)
    # a falsy override (0.0) still wins over the preset; only None means "the preset's"
    spec = RewardOverrides(reward="ddai-phase1", bias=0.0, w_format=0.25).reward_spec()
    assert (spec.bias, spec.w_ndcg, spec.w_format, spec.gate) == (0.0, 0.9, 0.25, True)


def test_progress_flag_sets_trl_disable_tqdm(tmp_path):
    # --progress (the default) shows TRL's tqdm bars; --no-progress (and --json) hide them.
    assert grpo_args(_cfg(tmp_path)).disable_tqdm is False
    assert grpo_args(_cfg(tmp_path, progress=False)).disable_tqdm is True
    sft = SFTRunConfig(model="m", data=[], output_dir=tmp_path / "s", progress=False)
    assert sft_args(sft).disable_tqdm is True
    assert (
        sft_args(SFTRunConfig(model="m", data=[], output_dir=tmp_path / "s")).disable_tqdm is False
    )
    for cmd in ("sft", "grpo"):
        help_text = runner.invoke(app, ["train", cmd, "--help"], terminal_width=200).output
        assert "--no-progress" in help_text, cmd


def test_parse_set_and_report_to():
    assert parse_set(["a=1", "b=true", "c=[1, 2]", "d=text"]) == {
        "a": 1,
        "b": True,
        "c": [1, 2],
        "d": "text",
    }
    with pytest.raises(TrainConfigError, match="KEY=VALUE"):
        parse_set(["novalue"])
    assert split_report_to(None) == ([], "jsonl")
    assert split_report_to("tensorboard,csv") == (["tensorboard"], "csv")
    assert split_report_to("none") == ([], None)


runner = CliRunner()


def test_cli_help_and_bad_input(tmp_path):
    for cmd in (
        ["train", "sft", "--help"],
        ["train", "grpo", "--help"],
        ["model", "tiny", "--help"],
    ):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 0 and "--" in res.output
    out = ["--out", str(tmp_path / "o")]
    grpo = ["train", "grpo", "--model", "m", "--corpus", str(tmp_path), *out]
    res = runner.invoke(app, [*grpo, "--data", str(tmp_path / "none.parquet")])
    assert res.exit_code == 2 and "ddai fixtures make" in res.output
    (tmp_path / "d.parquet").write_bytes(b"")
    res = runner.invoke(
        app, [*grpo, "--data", str(tmp_path / "d.parquet"), "--set", "bogus_knob=1"]
    )
    assert res.exit_code == 2 and "bogus_knob" in res.output
    sft = ["train", "sft", "--model", "m", "--data", str(tmp_path / "x.jsonl"), *out]
    res = runner.invoke(app, [*sft, "--resume"])
    assert res.exit_code == 2 and "checkpoint" in res.output


def test_cli_model_tiny(tmp_path):
    res = runner.invoke(app, ["model", "tiny", str(tmp_path / "m"), "--json"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "m" / "config.json").is_file() and '"parameters"' in res.output
    check("model-tiny", json.loads(res.stdout))  # docs/schemas/model-tiny.json
    res = runner.invoke(app, ["model", "tiny", str(tmp_path / "m")])
    assert res.exit_code == 2 and "--overwrite" in res.output
    res = runner.invoke(app, ["model", "tiny", str(tmp_path / "m2"), "--heads", "3"])
    assert res.exit_code == 2 and "--heads" in res.output


def test_cli_model_tiny_no_progress_silences_the_hf_bars(tmp_path):
    # transformers draws its own bars (shard writes, weight loads) on stderr: --no-progress and
    # --json turn them off, and --help does not claim the command draws none
    bars = ("Writing model shards", "Loading weights")
    res = runner.invoke(app, ["model", "tiny", str(tmp_path / "a"), "--progress"])
    assert res.exit_code == 0, res.output
    assert all(b in res.stderr for b in bars), res.stderr
    for flag in ("--no-progress", "--json"):
        res = runner.invoke(app, ["model", "tiny", str(tmp_path / flag.strip("-")), flag])
        assert res.exit_code == 0, res.output
        assert not any(b in res.stderr for b in bars), res.stderr
    res = runner.invoke(app, ["model", "tiny", "--help"])
    assert "draws none" not in res.output


def test_train_sft_json_is_one_document_that_matches_its_schema(tmp_path):
    # With --json TRL's rich display stays off: it draws on stdout, where the summary goes.
    from ddai.trainer import toy

    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")
    res = runner.invoke(
        app,
        ["train", "sft", "--model", str(tiny), "--data", str(data / "sft.parquet"),
         "--out", str(tmp_path / "s"), "--max-steps", "2", "--max-length", "256",
         "--batch-size", "2", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)  # the whole of stdout
    check("train-sft", summary)  # docs/schemas/train-sft.json
    assert summary["steps"] == 2 and summary["lora"] is False


def test_an_episode_setting_given_as_a_trl_knob_names_its_flag(tmp_path):
    # the nested episode/reward/backend settings are flags, never TRL knobs: the message says which
    from ddai.cli.app import load_command
    from ddai.trainer.grpo.config import episode_flags

    (tmp_path / "c.yaml").write_text("max_turns: 3\n")
    with pytest.raises(
        TrainConfigError, match=r"c\.yaml: 'max_turns' is a ddai setting.*--max-turns"
    ):
        grpo_args(_cfg(tmp_path, config_file=tmp_path / "c.yaml"))
    with pytest.raises(TrainConfigError, match=r"--set: 'bias' is a ddai setting.*--reward-bias"):
        grpo_args(_cfg(tmp_path, overrides={"bias": 0.1}))
    grpo_flags = {o for p in load_command("train").commands["grpo"].params for o in p.opts}
    assert set(episode_flags().values()) <= grpo_flags


@pytest.mark.parametrize("progress", [False, True])
def test_no_progress_silences_the_hugging_face_bars(progress, tmp_path, monkeypatch):
    # --no-progress left "Loading weights", "Tokenizing train dataset" and shard-writing bars on
    import datasets
    import transformers

    import ddai.trainer.sft.train as sft

    def stop(cfg):
        raise RuntimeError("stopped before training")

    monkeypatch.setattr(sft, "build_sft", stop)
    cfg = SFTRunConfig(model="m", data=[], output_dir=tmp_path / "s", progress=progress)
    try:
        with pytest.raises(RuntimeError, match="stopped before training"):
            sft.run_sft(cfg)
        assert datasets.is_progress_bar_enabled() is progress
        assert transformers.utils.logging.is_progress_bar_enabled() is progress
    finally:
        datasets.enable_progress_bars()
        transformers.utils.logging.enable_progress_bar()


def test_jsonable_turns_a_run_config_into_json_types():
    @dataclasses.dataclass
    class Inner:
        where: Path
        pair: tuple[int, int]

    @dataclasses.dataclass
    class Outer:
        inner: Inner
        table: dict
        odd: object

    value = Outer(Inner(Path("a/b"), (1, 2)), {3: [Path("c")]}, complex(1, 2))
    assert jsonable(value) == {
        "inner": {"where": "a/b", "pair": [1, 2]},
        "table": {"3": ["c"]},
        "odd": "(1+2j)",
    }


@pytest.mark.parametrize(
    ("field", "flag", "allowed"),
    [("loss_type", "--loss-type", "grpo, dr_grpo, dapo"), ("importance_sampling_level",
     "--ratio-level", "token, sequence")],
)  # fmt: skip
def test_a_bad_loss_type_or_ratio_level_is_refused_naming_where_it_came_from(
    tmp_path, field, flag, allowed
):
    # TRL takes any string here and fails on it only inside the loss, a whole step into the run
    with pytest.raises(TrainConfigError, match=f"{flag} 'bogus'.*{allowed}"):
        _cfg(tmp_path, **{field: "bogus"}).check()  # the CLI's check, before TRL is imported
    with pytest.raises(TrainConfigError, match=f"{flag} 'bogus'.*{allowed}"):
        grpo_args(_cfg(tmp_path, **{field: "bogus"}))
    with pytest.raises(TrainConfigError, match=f"--set {field}='bogus'.*{allowed}"):
        grpo_args(_cfg(tmp_path, overrides={field: "bogus"}))
    (tmp_path / "c.yaml").write_text(f"{field}: bogus\n")
    with pytest.raises(TrainConfigError, match=rf"c\.yaml: {field}='bogus'.*{allowed}"):
        grpo_args(_cfg(tmp_path, config_file=tmp_path / "c.yaml"))


def test_every_loss_type_and_ratio_level_ddai_lists_is_accepted(tmp_path):
    from ddai.trainer.trl_compat import GRPO_LOSS_TYPES, RATIO_LEVELS

    for loss in GRPO_LOSS_TYPES:
        assert grpo_args(_cfg(tmp_path, loss_type=loss)).loss_type == loss
    for level in RATIO_LEVELS:
        args = grpo_args(_cfg(tmp_path, importance_sampling_level=level))
        assert args.importance_sampling_level == level


@pytest.mark.parametrize(
    ("flag", "message"),
    [("--ratio-level", "--ratio-level 'bogus'"), ("--loss-type", "--loss-type 'bogus'")],
)
def test_cli_refuses_a_bad_loss_type_or_ratio_level_before_loading_or_logging(
    tmp_path, monkeypatch, flag, message
):
    # It loaded the model, logged a step of rollouts and wrote run_config.json, then failed in
    # TRL's loss; the run id was then taken ("already exists") by a run that never trained.
    import ddai.trainer.grpo.train as grpo_train
    from ddai.trainer import toy

    def no_model(*a, **k):
        raise AssertionError("the policy model was loaded")

    monkeypatch.setattr(grpo_train, "observation_policy", no_model)
    data = toy.write_toy(tmp_path / "toy")
    logs, out = tmp_path / "logs", tmp_path / "o"
    res = runner.invoke(
        app,
        ["train", "grpo", "--model", "m", "--data", str(data / "dataset.parquet"),
         "--corpus", str(data / "pages.parquet"), "--logs", str(logs), "--run-id", "bad4",
         "--out-dir", str(out), flag, "bogus", "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert message in res.output and "use one of" in res.output
    assert not (out / "run_config.json").exists()
    assert not (logs / "run_id=bad4").exists()


def test_lora_settings_without_lora_are_refused_in_every_command_that_has_them(tmp_path):
    """--lora-r, --lora-alpha and --lora-target shape an adapter that only --lora trains: given
    without it (train grpo, ppo, sft, plan) they were parsed and ignored; now the run refuses
    before any model loads, naming them. With --lora, or at their defaults, they pass."""
    from ddai.trainer.ppo.config import PPORunConfig
    from ddai.trainer.runtime.plan_config import PlanConfig
    from ddai.trainer.sft.train import run_sft

    corpus = tmp_path / "pages.parquet"
    corpus.write_bytes(b"")
    for make in (
        lambda **kw: GRPORunConfig(
            model="m", data=tmp_path / "d.parquet", corpus=corpus, output_dir=tmp_path, **kw
        ),
        lambda **kw: PPORunConfig(
            model="m", data=tmp_path / "d.parquet", corpus=corpus, output_dir=tmp_path, **kw
        ),
        lambda **kw: PlanConfig(model="m", **kw),  # no --lora-alpha: a plan does not need it
    ):
        with pytest.raises(TrainConfigError, match=r"^--lora-r, --lora-target without --lora"):
            make(lora_r=8, lora_target="q_proj").check()
        make(lora=True, lora_r=8, lora_target="q_proj").check()
    with pytest.raises(TrainConfigError, match=r"^--lora-alpha without --lora"):
        _cfg(tmp_path, lora_alpha=64).check_lora()
    sft = SFTRunConfig(model="/no/such/model", output_dir=tmp_path / "o", data=[], lora_r=4)
    with pytest.raises(TrainConfigError, match=r"^--lora-r without --lora"):
        run_sft(sft)  # refused before the (missing) model is looked for
    _cfg(tmp_path, lora=True, lora_r=8).check_lora()
    _cfg(tmp_path).check_lora()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--crop-pad", "-1"], "--crop-pad -1: use 0 or more pixels"),
        (["--obs-image-max-pixels", "-5"], "--obs-image-max-pixels -5: use 0 (no bound)"),
        (
            ["--obs-image-max-pixels", "100", "--obs-image-min-pixels", "200"],
            "--obs-image-max-pixels 100 is below --obs-image-min-pixels 200",
        ),
    ],
)
@pytest.mark.parametrize("command", [["train", "grpo"], ["train", "ppo"], ["collect"]])
def test_bad_crop_and_image_bounds_are_refused_before_a_model_loads(
    tmp_path, command, flags, message
):
    """They were refused only when the environment was built, after the policy had loaded."""
    from ddai.trainer import toy

    data = toy.write_toy(tmp_path / "toy")
    out = ["--out-dir", str(tmp_path / "o")] if command[0] == "train" else []
    res = runner.invoke(
        app,
        [*command, "--model", str(tmp_path / "no-model"), "--data", str(data / "dataset.parquet"),
         "--corpus", str(data / "pages.parquet"), "--logs", str(tmp_path / "logs"), *out,
         *flags, "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert message in said and "no-model" not in said  # the setting, not the missing model
