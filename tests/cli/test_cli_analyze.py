"""``ddai analyze attribution|latency|drop-keep`` through the Typer app."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import polars as pl
from conftest import FIXTURES
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store

sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines" / "analyses"))
from analysis_world import planted_store

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["analyze", *map(str, args)])


def test_attribution_json_and_out(tmp_path):
    logs, flags = planted_store(tmp_path)
    out = tmp_path / "attr.csv"
    res = _run("attribution", "--logs", logs, "--flags", flags, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert s["runs"]["r"]["counts"] == {
        "wrong_gt": 2,
        "generator_bottleneck": 2,
        "search_failure": 2,
    }
    assert s["runs"]["r"]["prompts_by_class"]["search_failure"] == ["p1", "p7"]
    assert s["flags_matched"] == s["flags_loaded"] > 0
    with open(out, newline="") as fh:
        rows = {r["uid"]: r for r in csv.DictReader(fh)}
    assert len(rows) == 8 and rows["p3"]["class"] == "wrong_gt"
    assert rows["p3"]["reason"] == "agreed_rejected_answer"


def test_attribution_table_prints_counts(tmp_path):
    logs, _ = planted_store(tmp_path)
    res = _run("attribution", "--logs", logs)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.replace("│", " ").split())  # the table wraps long cells
    # without --flags p5 is a search failure
    assert (
        "run r 6 low of 8 prompts: 1 wrong ground truth, 2 generator bottleneck, 3 search" in text
    )


def test_attribution_prints_precision_and_recall_with_a_truth_table(tmp_path):
    logs = tmp_path / "logs"
    assert (
        runner.invoke(
            app,
            [
                "ingest",
                *map(str, sorted((FIXTURES / "logs").glob("*.jsonl"))),
                "--logs",
                str(logs),
                "--json",
            ],
        ).exit_code
        == 0
    )
    res = _run("attribution", "--logs", logs, "--truth", FIXTURES / "truth.json", "--json")
    assert res.exit_code == 0, res.output
    classes = json.loads(res.output)["truth"]["classes"]
    assert set(classes) == {"wrong_gt", "search_failure", "generator_bottleneck"}
    assert all(0 <= v["precision"] <= 1 and 0 <= v["recall"] <= 1 for v in classes.values())
    table = _run("attribution", "--logs", logs, "--truth", FIXTURES / "truth.json")
    assert "precision" in table.output and "recall" in table.output


def test_a_run_without_judge_exits_2_naming_it(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "legacy", [{"uid": "u", "rollout_idx": 0, "reward": 0.5}])
    out = tmp_path / "attr.csv"
    res = _run("attribution", "--logs", logs, "--run", "legacy", "--out", out)
    assert res.exit_code == 2
    assert (
        "run legacy has no judge scores" in res.output
        and "score the run with a judge" in res.output
    )
    assert not out.exists()  # nothing written


def test_bad_out_suffix_and_missing_flags_exit_2(tmp_path):
    logs, _ = planted_store(tmp_path)
    res = _run("attribution", "--logs", logs, "--out", tmp_path / "x.txt")
    assert res.exit_code == 2 and ".csv, .parquet, .jsonl" in res.output
    res = _run("attribution", "--logs", logs, "--flags", tmp_path / "nope.csv")
    assert res.exit_code == 2 and "nope.csv not found" in res.output


def test_latency_out_parquet(tmp_path):
    logs, _ = planted_store(tmp_path)
    out = tmp_path / "lat.parquet"
    res = _run("latency", "--logs", logs, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["runs"]["r"]["timeouts"] == 1
    assert pl.read_parquet(out)["step"].to_list() == [1, 2]


def test_drop_keep_lists(tmp_path):
    logs, _ = planted_store(tmp_path)
    out, groups = tmp_path / "dk.jsonl", tmp_path / "zv.csv"
    res = _run("drop-keep", "--logs", logs, "--out", out, "--groups-out", groups, "--json")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["uid"] for r in rows if r["decision"] == "keep") == ["p6", "p7"]
    assert pl.read_csv(groups).height == 6


def test_help_explains_every_flag():
    res = _run("attribution", "--help")
    for flag in ("--score-max", "--agree-min", "--flags", "--truth", "--out", "--run", "--logs"):
        assert flag in res.output


def test_flags_naming_none_of_the_runs_prompts_exit_2(tmp_path):
    # A review of another round's prompts. Before: "flags loaded 2" and not one of them used,
    # exit 0, every prompt attributed as if there were no review.
    logs, _ = planted_store(tmp_path)
    other = tmp_path / "other_review.csv"
    other.write_text("uid,verdict,reason\ntrain_901,wrong,x\ntrain_902,uncertain,y\n")
    out = tmp_path / "attr.csv"
    res = _run("attribution", "--logs", logs, "--flags", other, "--out", out)
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert f"--flags {other}: none of its 2 flagged uids (first: 'train_901')" in said
    assert "is a prompt of run r" in said and not out.exists()


def test_out_help_says_which_rows_each_command_writes(tmp_path):
    # latency's --out file holds one row per run and step (test_latency_out_parquet), not per prompt
    for cmd, grain in (("latency", "per run and step"), ("attribution", "per prompt")):
        res = _run(cmd, "--help")
        text = " ".join(res.output.split())
        assert "per-prompt rows" not in text
        assert grain in text[text.index("--out") :], cmd
