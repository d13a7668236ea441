"""``ddai demo``: the whole loop on the synthetic world, as the README's first command runs it."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from cli_schemas import check
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store

runner = CliRunner()


def test_demo_runs_every_step_and_writes_its_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("DDAI_HOME", str(tmp_path))
    res = runner.invoke(app, ["demo", "--json"])
    assert res.exit_code == 0, res.output
    steps = json.loads(res.stdout)
    check("demo", steps)  # docs/schemas/demo.json
    assert list(steps) == ["synthetic_world", "ingest", "funnel", "distill", "report"]
    assert steps["synthetic_world"]["world_action"] == "built"
    assert not any("error" in s for s in steps.values())
    truth = json.loads((tmp_path / "demo" / "world" / "truth.json").read_text())
    assert steps["ingest"]["rollouts"] == sum(r["n_rollouts"] for r in truth["runs"].values())
    assert steps["funnel"]["matches_truth_json"] is True
    sft = pq.read_table(steps["distill"]["sft_file"])
    assert sft.num_rows == steps["distill"]["samples_written"] > 0
    report = tmp_path / "demo" / "out" / "report.html"
    assert steps["report"]["report"] == str(report) and report.stat().st_size > 100_000
    # A second run reuses the world and stays green (steps skip or replace their outputs).
    again = runner.invoke(app, ["demo", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["synthetic_world"]["world_action"].startswith("reused")
    # Another size rebuilds the world (it once reused the small one silently).
    other = runner.invoke(app, ["demo", "--size", "12", "--json"])
    assert other.exit_code == 0, other.output
    world = json.loads(other.stdout)["synthetic_world"]
    assert world["world_action"] == "rebuilt (it had seed 0, size small)"
    truth = json.loads((tmp_path / "demo" / "world" / "truth.json").read_text())
    assert (truth["generator"]["size"], truth["generator"]["n_prompts"]) == ("12", 12)


@pytest.mark.slow
def test_demo_train_logs_a_training_run(tmp_path, monkeypatch):
    monkeypatch.setenv("DDAI_HOME", str(tmp_path))
    res = runner.invoke(app, ["demo", "--train", "--json"])
    assert res.exit_code == 0, res.output
    steps = json.loads(res.stdout)
    train = steps["train"]
    assert train["grpo_steps"] == 2
    # The learnable task: the SFT start's groups have mixed outcomes, so GRPO moves the weights.
    assert train["changed_parameters"] > 0
    assert 0 < train["informative_group_share"] <= 1
    logs = tmp_path / "demo" / "logs"
    assert "demo_grpo" in store.list_runs(logs)
    rows = store.read_rollouts(logs, ["demo_grpo"]).to_pylist()
    assert len(rows) == 32  # 2 rollout batches of 4 prompts × 4
    assert sum(bool(r["format_ok"]) for r in rows) >= 16  # the start writes the valid format
    assert steps["report"]["runs"] == 5  # the four world runs and demo_grpo
