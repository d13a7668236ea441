"""``ddai train plan``: the command in docs/training.md prints per-rank memory for people and a --json
summary valid for its schema; bad input exits 2 naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

from cli_schemas import check
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
QWEN7B = str(ROOT / "configs" / "models" / "qwen2.5-7b.json")
ARGS = ["train", "plan", "--model", QWEN7B, "--lora", "--dtype", "bfloat16", "--accelerate",
        "zero3", "--gpus", "8"]  # fmt: skip


def test_plan_json_matches_its_schema_and_the_flags():
    res = runner.invoke(app, [*ARGS, "--accelerate", "ddp", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    check("train-plan", data)
    assert [s["strategy"] for s in data["strategies"]] == ["zero3", "ddp"]
    assert data["lora"] is True and data["gpus"] == 8
    assert data["trained_parameters"] < data["parameters"] // 100  # the adapter alone trains
    z3, ddp = data["strategies"]
    assert z3["weights_bytes"] * 7 < ddp["weights_bytes"]  # ZeRO-3 shards the weights 8 ways
    assert data["fits"] == [s["strategy"] for s in data["strategies"] if s["fits"]]


def test_plan_prints_a_table_and_whether_it_fits():
    res = runner.invoke(app, [*ARGS, "--micro-batch", "1", "--gpu-memory", "12GiB"])
    assert res.exit_code == 0, res.output
    assert "per-rank memory, GiB" in res.stdout and "zero3" in res.stdout
    assert "fits 8 × 12 GiB: none of the planned configs" in res.stdout


def test_bad_gpu_memory_exits_2_naming_the_flag():
    res = runner.invoke(app, [*ARGS, "--gpu-memory", "plenty"])
    assert res.exit_code == 2 and "--gpu-memory" in res.output


def test_a_model_that_is_not_there_exits_2_naming_it(tmp_path):
    # a missing folder or an uncached hub id was an OSError traceback, exit 1
    for model in (str(tmp_path / "nosuch"), "no-such-org/no-such-model"):
        res = runner.invoke(app, ["train", "plan", "--model", model, "--accelerate", "single"])
        assert res.exit_code == 2, res.output
        assert f"--model {model}: no such file or folder" in " ".join(res.output.split())
