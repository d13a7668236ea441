"""``ddai analyze attribution|latency|drop-keep`` through the Typer app."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import io, manifest

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


def _ingested(tmp_path):
    """The focused round-1 fixture log ingested as run ``r1`` (judge, pages, rewards, groups)."""
    logs = tmp_path / "logs"
    raw = FIXTURES / "logs" / "focused_r1.jsonl"
    res = runner.invoke(app, ["ingest", str(raw), "--logs", str(logs), "--run-id", "r1"])
    assert res.exit_code == 0, res.output
    return logs, raw


def _lineage(path):
    res = runner.invoke(app, ["lineage", str(path), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize(
    ("command", "extra", "step", "params"),
    [
        ("attribution", ["--score-max", "0.4"], "analyze.attribution",
         {"score_max": 0.4, "agree_min": 3, "threshold": 1.0, "flags": [], "runs": ["r1"]}),
        ("latency", [], "analyze.latency", {"runs": ["r1"]}),
        ("drop-keep", [], "analyze.drop-keep", {"runs": ["r1"]}),
    ],
)  # fmt: skip
def test_each_output_has_a_manifest_lineage_walks_to_the_raw_log(
    tmp_path, command, extra, step, params
):
    """Before: rows written without a manifest, so ``ddai lineage`` called the file foreign."""
    logs, raw = _ingested(tmp_path)
    out = tmp_path / "o" / "rows.parquet"
    res = _run(command, "--logs", logs, "--run", "r1", *extra, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    m = manifest.read(out)
    assert m is not None, "no manifest beside the output"
    assert m["step"] == step and m["params"] == params
    assert m["rows"]["out"] == pl.read_parquet(out).height > 0
    assert m["rows"]["in"] == 144  # the run's rollouts
    assert manifest.verify(out) is None
    graph = _lineage(out)
    [log] = [n for n in graph["nodes"] if n["kind"] == "log"]
    assert log["run_id"] == "r1" and log["path"] == str((logs / "run_id=r1").resolve())
    [src] = [n for n in graph["nodes"] if n["kind"] == "source"]
    assert src["name"] == raw.name


def test_drop_keep_out_and_groups_out_are_one_set(tmp_path):
    logs, _ = _ingested(tmp_path)
    out, groups = tmp_path / "dk.csv", tmp_path / "zv.jsonl"
    res = _run("drop-keep", "--logs", logs, "--out", out, "--groups-out", groups, "--json")
    assert res.exit_code == 0, res.output
    mo, mg = manifest.read(out), manifest.read(groups)
    assert mo and mg and mo["step_id"] == mg["step_id"]
    assert set(mo["set"]) == {"zv.jsonl"} and set(mg["set"]) == {"dk.csv"}
    assert mo["rows"]["out"] == pl.read_csv(out).height
    assert mg["rows"]["out"] == len(groups.read_text().splitlines())
    assert manifest.verify(out) is None and manifest.verify(groups) is None


def test_drop_keep_out_and_groups_out_naming_one_file_is_refused_by_its_flags(tmp_path):
    logs, _ = _ingested(tmp_path)
    same = tmp_path / "dk.csv"
    res = _run(
        "drop-keep", "--logs", logs, "--out", same, "--groups-out", tmp_path / "." / "dk.csv"
    )
    assert res.exit_code == 2
    assert f"--out and --groups-out both name {same}: give each its own file" in res.output
    assert not same.exists() and not manifest.manifest_path(same).exists()


def test_a_kill_mid_write_leaves_neither_file_nor_manifest(tmp_path):
    logs, _ = _ingested(tmp_path)
    out, groups = tmp_path / "dk.csv", tmp_path / "zv.csv"
    env = {**os.environ, "DDAI_TEST_CRASH_AT": "manifest:zv.csv"}
    code = "import sys; from ddai.cli.app import main; sys.argv = ['ddai', *sys.argv[1:]]; main()"
    args = ["analyze", "drop-keep", "--logs", str(logs), "--out", str(out), "--groups-out"]
    res = subprocess.run(
        [sys.executable, "-c", code, *args, str(groups)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == -signal.SIGKILL, res.stderr[-2000:]
    for p in (out, groups):
        assert not p.exists() and not manifest.manifest_path(p).exists()


def test_attribution_manifest_records_the_flags_it_read(tmp_path):
    logs, flags = planted_store(tmp_path)
    out = tmp_path / "attr.jsonl"
    res = _run("attribution", "--logs", logs, "--flags", flags, "--out", out)
    assert res.exit_code == 0, res.output
    m = manifest.read(out)
    assert m["params"]["flags"] == [str(Path(flags).resolve())]
    assert [i["path"] for i in m["inputs"]] == [
        str((logs / "run_id=r").resolve()),
        str(Path(flags).resolve()),
    ]
    assert m["inputs"][1]["sha256"] == io.sha256_file(flags)
    assert m["rows"]["out"] == 8 and m["notes"]["summary"]["runs"]["r"]["low"] == 6


def test_outputs_in_two_folders_each_get_their_manifest(tmp_path):
    logs, _ = planted_store(tmp_path)
    out, groups = tmp_path / "a" / "dk.csv", tmp_path / "b" / "zv.csv"
    res = _run("drop-keep", "--logs", logs, "--out", out, "--groups-out", groups)
    assert res.exit_code == 0, res.output
    assert manifest.verify(out) is None and manifest.verify(groups) is None
    assert manifest.read(groups)["rows"]["out"] == 6
