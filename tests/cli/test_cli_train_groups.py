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
            "--lora-target",
            "q_proj",
        ],
    )
    _check_nested(cfg)
    assert (cfg.kl_coef, cfg.whiten_advantages, cfg.learning_rate) == (0.3, False, 2e-6)
    assert (cfg.lora, cfg.lora_target, cfg.ppo_epochs) == (False, "q_proj", 4)


def test_train_collect_flags_reach_the_nested_and_own_fields(monkeypatch, inputs):
    args, _ = inputs
    cfg = _captured(
        monkeypatch,
        "ddai.trainer.search.collect",
        "run_collect",
        ["train", "collect", *args, *EPISODE_FLAGS, "--top-k", "5", "--json"],
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
    assert res.exit_code == 2 and "--data" in res.output and "nope.parquet" in res.output
