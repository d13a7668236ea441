"""DDAI's legacy flash logs (../shared/ddai-data/reconstructed) carry scores but no turns: ingest,
``ddai runs``, distill and the report say so instead of writing empty outputs."""

from __future__ import annotations

import json
import re

import pytest
from cli_schemas import check
from conftest import SHARED
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    shared = SHARED
    rec = shared / "ddai-data" / "reconstructed"
    logs = tmp_path_factory.mktemp("flash") / "logs"
    for run in ("round0", "round1"):
        src = rec / f"{run}_flash_rm_detail.jsonl"
        res = runner.invoke(
            app, ["ingest", str(src), "--run-id", run, "--logs", str(logs), "--json"]
        )
        assert res.exit_code == 0, res.output
        summary = json.loads(res.stdout)
        carried = summary["carries"][run]
        assert list(carried) == ["pages", "judge", "ndcg", "reward"]
        assert set(carried.values()) == {sum(summary["runs"].values())}  # every rollout
        assert summary["lacks"][run] == ["turns", "step", "advantages", "images"]
    return logs


def test_runs_show_no_turns(logs):
    res = runner.invoke(app, ["runs", "--logs", str(logs), "--json"])
    assert res.exit_code == 0, res.output
    caps = {r["run_id"]: r["capabilities"] for r in json.loads(res.stdout)["runs"]}
    assert caps["round1"]["turns"] == 0
    assert caps["round1"]["judge"] == caps["round1"]["rollouts"] == 13_664
    assert "turns" in caps["round0"]["lacks"]
    # flash rows log no format gate: the fail rate is unknown, never 0
    rates = {r["run_id"]: r["format_fail_rate"] for r in json.loads(res.stdout)["runs"]}
    assert rates == {"round0": None, "round1": None}
    # no rollout has a step: the count is unknown as the table's "—" says, never 0
    steps = {
        r["run_id"]: (r["steps"], r["first_step"], r["last_step"])
        for r in json.loads(res.stdout)["runs"]
    }
    assert steps == {"round0": (None, None, None), "round1": (None, None, None)}
    check("runs", json.loads(res.stdout))
    table = runner.invoke(app, ["runs", "--logs", str(logs)], terminal_width=200)
    # steps, turns and format fails unknown: "—", never 0 or blank
    assert re.search(r"round1\s+—\s+—\s+—\s+turns, step, advantages, images", table.stdout)


def test_distill_exits_2_naming_missing_turns_and_the_fix(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    res = runner.invoke(
        app,
        [
            "distill",
            "--run",
            "round1",
            "--logs",
            str(logs),
            "--success-rate-max",
            "0.5",
            "--top-k",
            "4",
            "--out",
            str(out),
            "--rewrite",
            "none",
        ],
        terminal_width=400,
    )
    assert res.exit_code == 2
    msg = " ".join(res.output.split())
    assert "run round1 has no turns" in msg
    assert "flash_rm_detail" in msg
    assert "unified log of the same round" in msg
    assert not out.exists()
    assert not list(tmp_path.iterdir())  # nothing written at all


def test_report_draws_no_chart_without_data_and_counts_all_rollouts(logs, tmp_path):
    out = tmp_path / "report.html"
    res = runner.invoke(
        app,
        ["report", "--logs", str(logs), "--compare", "round0", "round1", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    html = out.read_text()
    stats = json.loads(re.search(r'id="report-stats"[^>]*>(.*?)</script>', html, re.S)[1])
    assert stats["compare"]["shift"]["rollouts"] == {"a": 12_480, "b": 13_664}
    assert stats["behaviour"]["without_turns"] == ["round0", "round1"]
    figs = set(re.findall(r'<div id="(fig-[a-z-]+)"', html))
    # charts with data stay; the empty ones (no turns, no discrepancy, no suspect) are sentences
    assert {"fig-judge-ndcg-heatmap", "fig-behaviour-golden-rank"} <= figs
    assert not figs & {
        "fig-behaviour-actions",
        "fig-behaviour-turns",
        "fig-judge-ndcg-classes",
        "fig-hallucination-share",
    }
    assert "searches per rollout" not in html.split('id="fig-compare-distributions"')[1][:20_000]
    assert "carry no parsed turns" in html
    assert "falls in a discrepancy class" in html
