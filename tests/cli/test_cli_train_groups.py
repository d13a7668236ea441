"""The training commands' option groups reach their configs: the episode, reward and backend flags
land in the run config's nested ``episode``/``rewards``/``backends``, the flags read from the
config (``config_flags``) and the LoRA group in its own fields, with the flags' old names."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app

EPISODE_FLAGS = ["--max-turns", "3", "--search-k", "2", "--no-force-completion"]
EPISODE_FLAGS += ["--max-completion-tokens", "77", "--reward", "judge-only", "--no-gate"]
EPISODE_FLAGS += ["--reward-bias", "0.25", "--judge", "j", "--reward-timeout", "5"]


def _captured(monkeypatch, module: str, fn: str, args: list[str]):
    import importlib

    seen = []

    def fake(cfg, *a, **k):
        seen.append(cfg)
        raise ValueError("stopped after reading the config")

    monkeypatch.setattr(importlib.import_module(module), fn, fake)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "stopped after reading the config" in res.output, res.output
    return seen[0]


def _check_nested(cfg):
    assert (cfg.episode.max_turns, cfg.episode.search_k) == (3, 2)
    assert cfg.episode.force_completion is False and cfg.episode.max_completion_tokens == 77
    assert cfg.episode.obs_max_tokens == 256  # not given: the EpisodeConfig default
    assert (cfg.rewards.reward, cfg.rewards.gate, cfg.rewards.bias) == ("judge-only", False, 0.25)
    assert (cfg.backends.judge, cfg.backends.reward_timeout) == ("j", 5.0)


@pytest.fixture
def inputs(tmp_path):
    for name in ("d.parquet", "p.parquet"):
        (tmp_path / name).write_bytes(b"")
    common = ["--data", str(tmp_path / "d.parquet"), "--corpus", str(tmp_path / "p.parquet")]
    return [*common, "--model", "m"], tmp_path


def test_train_grpo_flags_reach_the_nested_and_own_fields(monkeypatch, inputs):
    args, tmp = inputs
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.grpo.train",
        "run_grpo",
        [
            "train",
            "grpo",
            *args,
            "--out-dir",
            str(tmp / "o"),
            *EPISODE_FLAGS,
            "--clip-low",
            "0.1",
            "--ratio-level",
            "token",
            "--lora",
            "--lora-r",
            "4",
        ],
    )
    _check_nested(cfg)
    assert (cfg.epsilon, cfg.importance_sampling_level) == (0.1, "token")
    assert (cfg.lora, cfg.lora_r, cfg.lora_alpha) == (True, 4, 32)


def test_train_ppo_flags_reach_the_nested_and_own_fields(monkeypatch, inputs):
    args, tmp = inputs
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.ppo.train",
        "run_ppo",
        [
            "train",
            "ppo",
            *args,
            "--out-dir",
            str(tmp / "o"),
            *EPISODE_FLAGS,
            "--kl",
            "0.3",
            "--no-whiten",
            "--lr",
            "2e-6",
            "--lora",
            "--lora-target",
            "q_proj",
        ],
    )
    _check_nested(cfg)
    assert (cfg.kl_coef, cfg.whiten_advantages, cfg.learning_rate) == (0.3, False, 2e-6)
    assert (cfg.lora, cfg.lora_target, cfg.ppo_epochs) == (True, "q_proj", 4)


def test_train_collect_flags_reach_the_nested_and_own_fields(monkeypatch, inputs):
    args, _ = inputs
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.episode.collect",
        "run_collect",
        ["collect", *args, *EPISODE_FLAGS, "--top-k", "5", "--json"],
    )
    _check_nested(cfg)
    assert (cfg.top_k, cfg.n_agent, cfg.progress) == (5, 1, False)


def test_missing_inputs_exit_2_naming_the_flag(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "train",
            "ppo",
            "--model",
            "m",
            "--data",
            str(tmp_path / "nope.parquet"),
            "--corpus",
            str(tmp_path),
            "--out-dir",
            str(tmp_path / "o"),
        ],
    )
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "--data" in said and "nope.parquet" in said
    assert "ddai fixtures make" in said  # how to get a dataset


# The run, TRL, device and preflight flags of the training commands come from shared groups
# (``ddai_cli/options.py``, ``value_opts.py``): each keeps the declaration and help it had when
# every command spelled it out.
DTYPE = (
    "Weight dtype: float32 (default; a GPU still computes in bf16 autocast), bfloat16, float16 or "
    "auto. `train grpo` / `train ppo` refuse half-precision weights that --lr is too small to "
    "change (pure bf16 at lr 1e-6); add --lora to train a float32 adapter."
)
DEVICE = {
    "--launch": "Run this command on N processes under `accelerate launch` (GPUs, or gloo on "
    "CPU); --batch-size stays per process, so the global batch is N × --batch-size.",
    "--accelerate-config": "accelerate config file for --launch (configs/accelerate/{ddp,zero2,"
    "zero3,fsdp}.yaml or your own). Default: plain data parallel.",
}
TRL = {
    "--max-steps": "Stop after this many optimizer steps.",
    "--lr": "Learning rate.",
    "--config": "TOML/YAML file of TRL config knobs (flat, or under a [trl] table).",
    "--report-to": "Metric sinks, comma-separated: jsonl (default) or csv file, plus integrations "
    "such as tensorboard; `none` for nothing.",
    "--save-steps": "Checkpoint every N steps.",
    "--logging-steps": "Log metrics every N steps.",
    "--resume": "Continue from the last checkpoint in --out-dir.",
}
RUN = {
    "--model": "Starting model: a local folder or a hub id (loaded with from_pretrained).",
    "--out-dir": "Output folder: checkpoints, metrics and the final model.",
    "--dtype": DTYPE,
    "--seed": "Random seed.",
}
PREFLIGHT = {
    "--skip-preflight": "Run without the preflight (golden pages in the corpus and returned by "
    "search, pages the policy and the generator can read, chat template renders the tags, "
    "sampled episodes complete and score); a training run records it in its run_config.json.",
    "--preflight-prompts": "Prompts whose n_agent episodes the preflight samples (4x as many "
    "questions are searched).",
}


def _value_helps(cls_path: str) -> dict[str, str]:
    """The value trainings' shared flags (``ddai.cli.value_fit.FIT``): help is the field's docstring,
    reST literals shown as `code`."""
    import importlib

    from ddai.cli.fields import field_help
    from ddai.cli.value_fit import FIT

    module, name = cls_path.split(":")
    cls = getattr(importlib.import_module(module), name)
    names = {f"--{f.replace('_', '-')}": f for f in FIT} | {"--out-dir": "output_dir"}
    names.pop("--output-dir")
    return {decl: field_help(cls, f).replace("``", "`") for decl, f in names.items()} | DEVICE


def _pointer_helps() -> dict[str, str]:
    from ddai.cli.fields import field_help
    from ddai.trainer.pointer.config import RLConfig

    names = ("norm", "adv_clip", "clip_eps", "kl_coef", "rce_t_start", "rce_t_end", "old_logp")
    helps = {f"--{n.replace('_', '-')}": field_help(RLConfig, n) for n in names}
    return helps | {"--reinforcepp-clip": field_help(RLConfig, "reinforcepp_clip")} | DEVICE


GROUPED = [
    (("train", "sft"), lambda: RUN | TRL | DEVICE),
    (("train", "grpo"), lambda: RUN | TRL | DEVICE | PREFLIGHT),
    (
        ("train", "ppo"),
        lambda: (
            RUN
            | DEVICE
            | PREFLIGHT
            | {
                "--model": "Starting policy: a local folder or a hub id.",
                "--out-dir": "Output folder: the policy, critic/ and metrics.jsonl.",
                "--seed": "Random seed (sampling, split, head init).",
            }
        ),
    ),
    (("collect",), lambda: PREFLIGHT),
    (("train", "value"), lambda: _value_helps("ddai.trainer.value.config:ValueTrainConfig")),
    (("train", "value-sft"), lambda: _value_helps("ddai.trainer.value.config:ValueSFTConfig")),
    (("pointer", "train"), _pointer_helps),
]


@pytest.mark.parametrize(("path", "helps"), GROUPED, ids=["-".join(p) for p, _ in GROUPED])
def test_grouped_flags_keep_their_declarations_and_help(path, helps):
    from ddai.cli.app import load_command

    cmd = load_command(path[0])
    for part in path[1:]:
        cmd = cmd.commands[part]
    shown = {p.opts[0]: p.help for p in cmd.params if p.opts[0].startswith("--")}
    want = helps()
    assert {decl: shown.get(decl) for decl in want} == want
    if "--reinforcepp-clip" in want:  # a boolean pair keeps its --no- form
        flag = next(p for p in cmd.params if p.opts[0] == "--reinforcepp-clip")
        assert flag.secondary_opts == ["--no-reinforcepp-clip"]


def test_value_sft_seed_help_shows_its_literal_as_code():
    # the value commands' help is the field's docstring, its reST literal ``x`` shown as `x`
    # (config_flags' one rendering of every docstring it reads)
    res = CliRunner().invoke(app, ["train", "value-sft", "--help"], terminal_width=400)
    flat = " ".join(res.output.split())
    assert "`data_sampling.seed`" in flat and "``data_sampling.seed``" not in flat


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "ppo", "--preflight-prompts", "0"], "--preflight-prompts"),
        (["train", "sft", "--data", "x.parquet"], "--model"),  # required flags stay required
        (["train", "value", "--model", "m"], "--out-dir"),
    ],
)
def test_grouped_flags_keep_their_checks(args, flag):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and flag in res.output


def test_device_group_reaches_the_relaunch(monkeypatch, tmp_path):
    # --accelerate-config without --launch is refused by maybe_relaunch, which now gets the group
    res = CliRunner().invoke(
        app,
        ["train", "value", "--model", "m", "--out-dir", str(tmp_path), "--accelerate-config", "a"],
    )
    assert res.exit_code == 2 and "--accelerate-config needs --launch N" in res.output


def test_sft_group_flags_reach_their_fields(monkeypatch, tmp_path):
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.sft.train",
        "run_sft",
        [
            *["train", "sft", "--model", "m", "--data", "d.parquet", "--out-dir", str(tmp_path)],
            *["--lr", "0.5", "--max-steps", "3", "--dtype", "bfloat16", "--seed", "7"],
            *["--config", "c.toml", "--report-to", "csv", "--resume", "--save-steps", "2"],
        ],
    )
    assert (cfg.model, cfg.output_dir, cfg.dtype, cfg.seed) == ("m", tmp_path, "bfloat16", 7)
    assert (cfg.learning_rate, cfg.max_steps, cfg.report_to) == (0.5, 3, "csv")
    assert (str(cfg.config_file), cfg.resume, cfg.save_steps, cfg.logging_steps) == (
        "c.toml",
        True,
        2,
        None,  # not given: SFTRunConfig's default
    )


def test_value_group_flags_reach_their_fields(monkeypatch, tmp_path):
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.value.train",
        "train_value",
        [
            *["train", "value", "--model", "m", "--out-dir", str(tmp_path), "--run", "r"],
            *["--trunk-lr", "0.25", "--max-length", "64", "--seed", "3", "--bin-edges", "0.5"],
        ],
    )
    assert (cfg.model, cfg.output_dir, cfg.trunk_lr, cfg.max_length) == ("m", tmp_path, 0.25, 64)
    assert (cfg.seed, cfg.bin_edges, cfg.head_lr) == (3, [0.5], 1e-4)  # head_lr: its default


def test_pointer_rl_group_reaches_the_rl_config(monkeypatch, tmp_path):
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.pointer.train",
        "run_train",
        [
            *["pointer", "train", "--store", str(tmp_path / "s"), "--out-dir", str(tmp_path / "o")],
            *["--phases", "rce:1,grpo:2", "--kl-coef", "0.3", "--no-reinforcepp-clip"],
        ],
    )
    assert (cfg.rl.kl_coef, cfg.rl.reinforcepp_clip, cfg.rl.norm) == (0.3, False, "zscore")
