"""``--launch N``: the accelerate command line it builds, and the shipped accelerate configs, each
parsed and validated by accelerate's own launcher code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.trainer.runtime.launch import launch_command, strip_flags

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "accelerate"


def test_strip_flags_drops_launch_options_in_both_forms():
    argv = [
        "train",
        "grpo",
        "--launch",
        "2",
        "--model",
        "m",
        "--accelerate-config=c.yaml",
        "--json",
    ]
    assert strip_flags(argv) == ["train", "grpo", "--model", "m", "--json"]


def test_launch_command_runs_the_module_on_n_processes():
    cmd = launch_command(["train", "sft", "--model", "m"], 2, port=1234)
    assert cmd[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert "--multi_gpu" in cmd  # not --cpu: that starts one process only
    import torch

    if not torch.cuda.is_available():  # CPU training is float32 whatever a config says
        assert cmd[cmd.index("--mixed_precision") + 1] == "no"
    i = cmd.index("--num_processes")
    assert cmd[i + 1] == "2" and cmd[cmd.index("--main_process_port") + 1] == "1234"
    assert cmd[-6:] == ["--module", "ddai.cli.app", "train", "sft", "--model", "m"]
    with_cfg = launch_command(["x"], 4, config_file=CONFIGS / "fsdp.yaml", port=1)
    assert "--multi_gpu" not in with_cfg
    assert with_cfg[with_cfg.index("--config_file") + 1] == str(CONFIGS / "fsdp.yaml")
    with pytest.raises(ValueError, match="≥ 1"):
        launch_command(["x"], 0)
    with pytest.raises(FileNotFoundError, match="configs/accelerate"):
        launch_command(["x"], 2, config_file="nope.yaml")


def test_cli_rejects_a_missing_accelerate_config_with_exit_2(tmp_path):
    sft = ["train", "sft", "--model", "m", "--data", "d.parquet", "--out", str(tmp_path)]
    res = CliRunner().invoke(
        app, [*sft, "--launch", "2", "--accelerate-config", str(tmp_path / "none.yaml")]
    )
    assert res.exit_code == 2 and "not found" in res.output
    res = CliRunner().invoke(app, [*sft, "--accelerate-config", str(CONFIGS / "ddp.yaml")])
    assert res.exit_code == 2 and "needs --launch" in res.output


def _validated(name: str):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    parsed = launch_command_parser().parse_args(["--config_file", str(CONFIGS / name), "x.py"])
    args, _, _ = _validate_launch_command(parsed)
    return args


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ddp.yaml", "MULTI_GPU"),
        ("zero2.yaml", "DEEPSPEED"),
        ("zero3.yaml", "DEEPSPEED"),
        ("fsdp.yaml", "FSDP"),
    ],
)
def test_shipped_configs_parse_as_accelerate_cluster_configs(name, kind):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    cfg = load_config_from_file(str(CONFIGS / name))
    assert isinstance(cfg, ClusterConfig) and cfg.distributed_type.name == kind
    args = _validated(name)
    assert args.num_processes == 8 and args.num_machines == 1
    assert args.multi_gpu == (kind == "MULTI_GPU")
    assert args.use_deepspeed == (kind == "DEEPSPEED")
    assert args.use_fsdp == (kind == "FSDP")


def test_zero_configs_select_their_stage():
    assert _validated("zero2.yaml").zero_stage == 2
    z3 = _validated("zero3.yaml")
    assert z3.zero_stage == 3 and z3.zero3_save_16bit_model in (True, "true")


def test_fsdp_config_builds_a_full_state_dict_fsdp2_plugin(monkeypatch):
    """The environment accelerate launch would set turns into the plugin the trainer uses: FSDP2,
    whole-layer wrapping, and a full state dict, so the final save is one loadable checkpoint."""
    from accelerate.utils import FullyShardedDataParallelPlugin, prepare_multi_gpu_env

    env = prepare_multi_gpu_env(_validated("fsdp.yaml"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert os.environ["ACCELERATE_USE_FSDP"] == "true"
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.state_dict_type.name == "FULL_STATE_DICT"
    assert plugin.auto_wrap_policy.__name__ == "transformer_auto_wrap_policy"


@pytest.mark.parametrize(
    "command",
    [
        ["train", "value", "--model", "m", "--out", "o"],
        ["train", "ppo", "--model", "m", "--data", "d", "--corpus", "c", "--out", "o"],
        ["pointer", "train", "--store", "s", "--out", "o"],
    ],
)
def test_every_trainer_takes_launch_flags(command):
    res = CliRunner().invoke(app, [*command, "--accelerate-config", str(CONFIGS / "ddp.yaml")])
    assert res.exit_code == 2 and "needs --launch" in res.output
