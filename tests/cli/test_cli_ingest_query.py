"""``ddai ingest``, ``ddai query`` and ``ddai runs`` through the Typer app."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()
RESP = "<think>t</think>\n<search>q</search><think>d</think><search_complete>true</search_complete>"


def _src(tmp_path, rows):
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    return p


def _ingested(tmp_path):
    """A store at ``tmp_path/logs`` holding ``_rows()`` as run r1."""
    logs = tmp_path / "logs"
    src = _src(tmp_path, _rows())
    res = runner.invoke(app, ["ingest", str(src), "--run-id", "r1", "--logs", str(logs)])
    assert res.exit_code == 0, res.output
    return logs


def _rows():
    return [
        {"uid": f"u{u}", "rollout_idx": i, "response": RESP, "judge_score": float(i < u)}
        for u in range(3)
        for i in range(4)
    ]


def test_ingest_then_query(tmp_path):
    logs = tmp_path / "logs"
    res = runner.invoke(
        app,
        ["ingest", str(_src(tmp_path, _rows())), "--run-id", "r1", "--logs", str(logs), "--json"],
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert s["rows_in"] == 13 and s["rollouts_out"] == 12 and s["quarantined"] == 1
    assert s["quarantined_by_reason"] == {"malformed JSON": 1}
    assert s["formats"] == {str(tmp_path / "in.jsonl"): "ddai"}

    res = runner.invoke(
        app,
        [
            "query",
            "SELECT run_id, count(*) AS n FROM rollouts GROUP BY 1",
            "--logs",
            str(logs),
            "--format",
            "csv",
        ],
    )
    assert res.exit_code == 0, res.output
    assert list(csv.reader(io.StringIO(res.output))) == [["run_id", "n"], ["r1", "12"]]

    res = runner.invoke(
        app,
        [
            "query",
            "SELECT uid, success_rate FROM prompts_at($t) ORDER BY uid",
            "-p",
            "t=1.0",
            "--logs",
            str(logs),
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    got = [json.loads(x) for x in res.output.splitlines()]
    assert got == [
        {"uid": "u0", "success_rate": 0.0},
        {"uid": "u1", "success_rate": 0.25},
        {"uid": "u2", "success_rate": 0.5},
    ]

    out = tmp_path / "p.parquet"
    res = runner.invoke(
        app,
        [
            "query",
            "SELECT * FROM prompts",
            "--logs",
            str(logs),
            "--format",
            "parquet",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0 and out.is_file()

    res = runner.invoke(app, ["runs", "--logs", str(logs), "--json"])
    (run,) = json.loads(res.output)["runs"]
    assert run["run_id"] == "r1" and run["rollouts"] == 12 and run["prompts"] == 3


def test_errors_are_clear(tmp_path):
    res = runner.invoke(app, ["query", "SELECT 1", "--logs", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = runner.invoke(app, ["ingest", str(tmp_path / "nope.jsonl"), "--logs", str(tmp_path)])
    assert res.exit_code == 2 and "not found" in res.output
    res = runner.invoke(app, ["query", "SELECT * FROM nowhere", "--logs", str(tmp_path)])
    assert res.exit_code == 2 and "nowhere" in res.output
    res = runner.invoke(app, ["query", "SELECT 1", "-p", "bad", "--logs", str(tmp_path)])
    assert res.exit_code == 2 and "NAME=VALUE" in res.output


def test_default_log_store_is_the_workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    res = runner.invoke(app, ["ingest", str(_src(tmp_path, _rows())), "--run-id", "r1"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "home" / "logs" / "run_id=r1" / "_manifest.json").is_file()


UNIFIED = Path(__file__).resolve().parents[2] / "fixtures" / "unified" / "curriculum"


def test_wrong_format_that_reads_nothing_names_the_detected_one(tmp_path):
    src = str(UNIFIED / "unified_trajectory.jsonl")
    args = ["ingest", src, "--input-format", "verl", "--logs", str(tmp_path / "logs")]
    res = runner.invoke(app, [*args, "--no-progress"])
    assert res.exit_code == 1
    assert (
        f"hint: wrong --input-format? detected: ddai-unified ({src}); rerun with --input-format "
        "ddai-unified or --input-format auto" in " ".join(res.stderr.split())
    )
    s = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert s["rollouts_out"] == 0 and s["quarantined"] == s["rows_in"] > 0
    assert s["hint"].startswith("wrong --input-format? detected: ddai-unified")
    # The right format reads the file; auto agrees, so no hint is given.
    ok = runner.invoke(app, ["ingest", src, "--logs", str(tmp_path / "ok"), "--json"])
    assert ok.exit_code == 0 and "hint" not in json.loads(ok.stdout)


def test_old_format_spelling_still_works_with_a_notice(tmp_path):
    # `ingest --format` (the input format) is now --input-format; the old spelling is rewritten
    # with one line on stderr, and stdout stays the JSON summary.
    src = str(UNIFIED / "unified_trajectory.jsonl")
    args = ["ingest", src, "--format", "ddai-unified", "--logs", str(tmp_path / "l"), "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["formats"] == {src: "ddai-unified"}
    assert (
        res.stderr
        == "note: `ddai ingest --format` is now --input-format; the old spelling will go.\n"
    )
    # `ingest --out DIR` was the log store: now --logs.
    res = runner.invoke(app, ["ingest", src, "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0 and list((tmp_path / "o").glob("run_id=*"))
    assert "is now --logs" in res.stderr


def test_empty_store_and_empty_results_say_so(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(app, ["runs", "--logs", str(empty)])
    assert res.exit_code == 0
    assert " ".join(res.output.split()) == (
        f"no runs in the log store {empty}: add one with `ddai ingest FILE --logs {empty}`"
    )
    assert json.loads(runner.invoke(app, ["runs", "--logs", str(empty), "--json"]).output) == {
        "runs": []
    }
    logs = tmp_path / "logs"
    runner.invoke(
        app, ["ingest", str(_src(tmp_path, _rows())), "--run-id", "r1", "--logs", str(logs)]
    )
    res = runner.invoke(
        app, ["query", "SELECT uid, reward FROM rollouts WHERE uid = 'none'", "--logs", str(logs)]
    )
    assert res.exit_code == 0
    assert res.output.strip() == "no rows: the query matched nothing (columns: uid, reward)"


def test_a_query_over_an_empty_store_blames_the_store_not_the_query(tmp_path):
    # Before: "no rows: the query matched nothing", as if the SQL were wrong.
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(app, ["query", "SELECT uid FROM rollouts", "--logs", str(empty)])
    assert res.exit_code == 0
    said = " ".join(res.output.split())
    assert said.startswith(f"no rows: the log store {empty} holds no rollouts: ingest logs first")
    assert "matched nothing" not in said
    out = tmp_path / "q.csv"
    res = runner.invoke(
        app, ["query", "SELECT uid FROM rollouts", "--logs", str(empty), "--out", str(out)]
    )
    assert res.exit_code == 0 and out.read_text() == "uid\n"
    assert f"note: the log store {empty} holds no rollouts" in " ".join(res.stderr.split())


def test_an_ingest_that_stores_no_rollout_says_why_on_stderr(tmp_path):
    logs = tmp_path / "logs"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"uid": "u1"}\n{"uid": "u2", "rollout_idx": 0, "judge_score": "x"}\n')
    args = ["ingest", str(bad), "--input-format", "ddai", "--run-id", "r1", "--logs", str(logs)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1
    err = " ".join(res.stderr.split())
    assert err.startswith("error: all 2 rows were quarantined (")
    # the quarantine part this ingest committed (listed in the run's quarantine log)
    (part,) = (logs / "_quarantine" / "r1").glob("part-*.jsonl")
    assert f"no run was stored. Each line's reason is in {part}." in err
    # a file of side events only (a run's training metrics, no rollout): nothing stored, said so
    side = tmp_path / "side.jsonl"
    event = {"event_type": "train.step.metrics", "run_id": "r2", "global_step": 1, "metrics": {}}
    side.write_text(json.dumps(event) + "\n")
    res = runner.invoke(
        app, ["ingest", str(side), "--input-format", "ddai-unified", "--logs", str(logs)]
    )
    assert res.exit_code == 1
    assert "error: the input holds no rollout rows (only side events" in " ".join(
        res.stderr.split()
    )
    assert not (logs / "_side").exists() or not any((logs / "_side").rglob("*.jsonl"))
    res = runner.invoke(app, ["ingest", str(side), "--logs", str(logs), "--json"])
    assert res.exit_code == 1
    assert json.loads(res.stdout)["error"].startswith("the input holds no rollout rows")


def test_an_aggregate_over_an_empty_store_notes_the_store(tmp_path):
    # Before: `count(*)` over a folder with no rollouts printed 0 and exited 0 with no word that
    # the store is empty (the note came only with zero result rows): a wrong --logs read as "0".
    empty = tmp_path / "empty"
    empty.mkdir()
    sql = "SELECT count(*) AS n FROM rollouts"
    res = runner.invoke(app, ["query", sql, "--logs", str(empty)])
    assert res.exit_code == 0
    assert "0" in res.stdout
    assert f"note: the log store {empty} holds no rollouts" in " ".join(res.stderr.split())
    res = runner.invoke(app, ["query", sql, "--logs", str(empty), "--json"])
    got = json.loads(res.stdout)
    assert (got["rows"], got["data"]) == (1, [[0]])
    assert got["note"].startswith(f"the log store {empty} holds no rollouts")
    # a store with rollouts: no note
    logs = tmp_path / "logs"
    runner.invoke(
        app, ["ingest", str(_src(tmp_path, _rows())), "--run-id", "r1", "--logs", str(logs)]
    )
    res = runner.invoke(app, ["query", sql, "--logs", str(logs), "--json"])
    assert json.loads(res.stdout)["note"] is None and "note" not in res.stderr


def test_a_log_store_that_is_a_file_is_refused_naming_it(tmp_path):
    # Before: runs said "no runs in the log store" and exited 0, query answered over nothing,
    # and ingest failed with "[Errno 17] File exists".
    f = tmp_path / "rollouts.parquet"
    f.write_bytes(b"PAR1")
    want = f"log store {f} is a file, not a folder"
    for args in (["runs"], ["query", "SELECT count(*) FROM rollouts"]):
        res = runner.invoke(app, [*args, "--logs", str(f)])
        assert res.exit_code == 2, (args, res.output)
        assert want in " ".join(res.stderr.split())
    src = _src(tmp_path, _rows())
    res = runner.invoke(app, ["ingest", str(src), "--run-id", "r1", "--logs", str(f)])
    assert res.exit_code == 2 and want in " ".join(res.stderr.split())
    assert f.read_bytes() == b"PAR1"


def test_query_out_naming_a_directory_is_refused_naming_it(tmp_path):
    """``--out`` a folder ended in IsADirectoryError's traceback (exit 1), after the query ran."""
    logs = _ingested(tmp_path)
    folder = tmp_path / "results"
    folder.mkdir()
    for fmt in ("csv", "json", "parquet", "table"):
        args = ["query", "SELECT uid FROM rollouts", "--logs", str(logs), "--out", str(folder)]
        res = runner.invoke(app, [*args, "--format", fmt])
        assert res.exit_code == 2, (fmt, res.output)
        said = " ".join(res.output.split())
        assert f"--out {folder} is a folder: name a file in it" in said, said
        assert res.exception is None or isinstance(res.exception, SystemExit)
    assert list(folder.iterdir()) == [] and not list(tmp_path.glob(".results*"))


def test_a_cut_manifest_file_is_named_by_runs_query_and_lineage(tmp_path):
    """A run's ``_manifest.json`` cut short made ``ddai runs`` end in a JSONDecodeError traceback
    and ``query``/``lineage`` print the bare JSON error, naming no file; now each exits 2 naming
    the file and the fix, and the fix (remove the checkpoint: the log holds the commits) works."""
    logs = _ingested(tmp_path)
    part = logs / "run_id=r1"
    ck = part / "_manifest.json"
    ck.write_bytes(ck.read_bytes()[:50])
    calls = {
        "runs": ["runs", "--logs", str(logs)],
        "query": ["query", "SELECT count(*) AS n FROM rollouts", "--logs", str(logs)],
        "lineage": ["lineage", str(part)],
    }
    for name, args in calls.items():
        res = runner.invoke(app, args)
        said = " ".join(res.output.split())
        assert res.exit_code == 2, (name, res.output, res.exception)
        assert f"run 'r1': its manifest file {ck} is not valid JSON" in said, (name, said)
        assert "remove it: it only checkpoints the commits in" in said, (name, said)
    ck.unlink()
    res = runner.invoke(
        app, ["query", "SELECT count(*) AS n FROM rollouts", "--logs", str(logs), "--json"]
    )
    assert res.exit_code == 0 and json.loads(res.output)["data"] == [[12]]
