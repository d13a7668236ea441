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
    assert list(steps) == ["synthetic_world", "ingest", "funnel", "distill", "report", "next"]
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


def test_after_the_demo_runs_report_and_serve_need_no_flags(tmp_path, monkeypatch):
    """A fresh DDAI_HOME has no <home>/logs: the readers fall back to the demo's store and say
    so on stderr, and the demo's summary names exactly these commands."""
    import uvicorn

    monkeypatch.setenv("DDAI_HOME", str(tmp_path))
    monkeypatch.delenv("DDAI_LOGS", raising=False)
    monkeypatch.chdir(tmp_path)  # no ddai.toml in reach
    res = runner.invoke(app, ["demo", "--json"])
    assert res.exit_code == 0, res.output
    nxt = json.loads(res.stdout)["next"]
    demo_logs = tmp_path / "demo" / "logs"
    assert nxt == {
        "open_the_report": str(tmp_path / "demo" / "out" / "report.html"),
        "serve_the_store": "ddai serve",
        "list_the_runs": "ddai runs",
        "query_it": 'ddai query "SELECT run_id, count(*) FROM rollouts GROUP BY 1"',
    }
    assert (tmp_path / "demo" / "out" / "report.html").is_file()
    runs = runner.invoke(app, ["runs", "--json"])
    assert runs.exit_code == 0, runs.output
    names = {r["run_id"] for r in json.loads(runs.stdout)["runs"]}
    assert names == {"curriculum", "focused_r1", "focused_r2", "phase1"}
    assert f"reading the demo's {demo_logs}" in runs.stderr
    rep = runner.invoke(app, ["report", "--json"])
    assert rep.exit_code == 0, rep.output
    assert sorted(json.loads(rep.stdout)["runs"]) == sorted(names)
    assert (tmp_path / "report.html").is_file()
    calls: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    served = runner.invoke(app, ["serve"])
    assert served.exit_code == 0, served.output
    assert len(calls) == 1
    # a writer keeps <home>/logs: an ingest never lands in the demo's store by default
    src = str(tmp_path / "demo" / "world" / "logs" / "phase1.jsonl")
    ing = runner.invoke(app, ["ingest", src, "--json"])
    assert ing.exit_code == 0, ing.output
    assert (tmp_path / "logs").is_dir()
    # now <home>/logs exists: the demo prints the --logs its commands need
    again = runner.invoke(app, ["demo", "--json"])
    assert json.loads(again.stdout)["next"]["list_the_runs"] == f"ddai runs --logs {demo_logs}"
