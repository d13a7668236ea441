"""Issue 16's attacks on row containment, model-call exit codes and typed input, repeated.

Each test replays one attack through the CLI (or the function the CLI calls) and asserts the fixed
behaviour: a bad row is quarantined with its reason, file and line while the rest is written; a
command whose model calls failed exits 1 and never replaces a score by a failure; parameters and
run ids are typed and checked; CSV cells cannot run as spreadsheet formulas.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from support.fakes import FakeModelServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import adapters, store
from ddai.pipelines.adapters import base
from ddai.pipelines.funnel import review
from ddai.pipelines.records import decisions
from ddai.pipelines.store import quarantine

runner = CliRunner()


def _row(i: int, **kw) -> dict:
    return {"run_id": "r", "uid": f"u{i}", "rollout_idx": 0, "reward": 1.0, "answer": "a", **kw}


def _ingest(logs, *srcs, extra=()) -> tuple[int, dict]:
    res = runner.invoke(app, ["ingest", *map(str, srcs), "--logs", str(logs), "--json", *extra])
    return res.exit_code, (json.loads(res.output) if res.exit_code == 0 else {"out": res.output})


def _quarantine(logs, run: str) -> list[dict]:
    return [json.loads(line) for line in quarantine.read(logs, run).decode().splitlines()]


# ---------------------------------------------------------------- every row contained


LONE = '"x\\ud83d"'  # JSON text of a string holding half an emoji


def test_lone_surrogate_in_a_native_log_quarantines_that_row_only(tmp_path):
    src = tmp_path / "native.jsonl"
    bad = json.dumps(_row(1)).replace('"a"', LONE)
    src.write_text(json.dumps(_row(0)) + "\n" + bad + "\n" + json.dumps(_row(2)) + "\n")
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rows_in"], s["rollouts_out"], s["quarantined_by_reason"]) == (
        3,
        2,
        {"lone surrogate": 1},
    )
    (q,) = _quarantine(tmp_path / "logs", "r")
    assert (q["source"], q["line"], q["reason"]) == (str(src), 2, "lone surrogate")
    assert "\\ud83d" in q["raw"]  # the raw line is kept as written
    uids = store.read_rollouts(tmp_path / "logs", ["r"]).column("uid").to_pylist()
    assert sorted(uids) == ["u0", "u2"]


def test_lone_surrogate_in_a_flash_log_quarantines_that_row_only(tmp_path):
    line = {
        "local_idx": 0,
        "sample_idx": 0,
        "uid": "train_1",
        "final_score": 1.0,
        "judge_score": 1.0,
        "generated_answer": "ok",
    }
    src = tmp_path / "round9_flash_rm_detail.jsonl"
    bad = json.dumps({**line, "local_idx": 1}).replace('"ok"', LONE)
    src.write_text(json.dumps(line) + "\n" + bad + "\n" + json.dumps({**line, "local_idx": 2}))
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert s["formats"] == {str(src): "ddai-flash"}
    assert (s["rollouts_out"], s["quarantined_by_reason"]) == (2, {"lone surrogate": 1})
    (q,) = _quarantine(tmp_path / "logs", "round9")
    assert (q["line"], q["reason"]) == (2, "lone surrogate")


def test_lone_surrogate_in_a_phase1_document_quarantines_that_agent_only(tmp_path):
    agents = [{"agent_id": i + 1, "response": "<think>t</think>", "answer": "ok"} for i in range(3)]
    doc = {"step_1": {"p-1": {"prompt": "q", "agents": agents}}}
    src = tmp_path / "gspo_phase1.json"
    src.write_text(json.dumps(doc).replace('"ok"', LONE, 1))  # the first agent's answer
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rollouts_out"], s["quarantined_by_reason"]) == (2, {"lone surrogate": 1})
    (q,) = _quarantine(tmp_path / "logs", "gspo_phase1")
    assert q["line"] == 1 and "\\ud83d" in q["raw"]  # unit 1, kept \u-escaped


def test_invalid_utf8_in_a_parquet_source_quarantines_that_row_only(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    uids = pa.array([b"u0", b"\xff\xfe", b"u2"], pa.binary()).view(pa.string())  # unvalidated
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"uid": uids, "rollout_idx": [0, 0, 0], "run_id": ["p"] * 3}), src)
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rollouts_out"], s["quarantined_by_reason"]) == (2, {"unreadable row": 1})
    (q,) = _quarantine(tmp_path / "logs", "p")
    assert q["line"] == 2 and "UnicodeDecodeError" in q["detail"]


def test_a_line_nested_100000_deep_is_quarantined_not_a_traceback(tmp_path):
    src = tmp_path / "deep.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    src.write_text(json.dumps(_row(0)) + "\n" + deep + "\n" + json.dumps(_row(1)) + "\n")
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rollouts_out"], s["quarantined_by_reason"]) == (2, {"too deeply nested": 1})
    (q,) = _quarantine(tmp_path / "logs", "r")
    assert (q["line"], q["reason"], len(q["raw"])) == (2, "too deeply nested", 200_001)


def test_a_line_over_the_size_limit_is_quarantined_with_its_size_and_reading_goes_on(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(base, "MAX_LINE_BYTES", 10_000)
    monkeypatch.setattr(base, "RAW_PREFIX_BYTES", 100)
    big = json.dumps(_row(1, answer="y" * 50_000))
    src = tmp_path / "big.jsonl"
    src.write_text(json.dumps(_row(0)) + "\n" + big + "\n" + json.dumps(_row(2)) + "\n")
    code, s = _ingest(tmp_path / "logs", src, extra=["--input-format", "ddai"])
    assert code == 0, s
    assert (s["rollouts_out"], s["quarantined_by_reason"]) == (2, {"line too long": 1})
    (q,) = _quarantine(tmp_path / "logs", "r")  # charged to the run its file feeds
    assert q["line"] == 2 and f"{len(big) + 1:,} bytes" in q["detail"] and len(q["raw"]) == 100
    uids = store.read_rollouts(tmp_path / "logs", ["r"]).column("uid").to_pylist()
    assert sorted(uids) == ["u0", "u2"]  # the line after the long one is read whole


def test_wrong_types_and_any_fault_of_one_row_are_quarantined(tmp_path, monkeypatch):
    flash = {"local_idx": 0, "sample_idx": 0, "uid": "t", "final_score": 1.0, "judge_score": 1.0}
    src = tmp_path / "round7_flash_rm_detail.jsonl"
    rows = [
        flash,
        {**flash, "local_idx": 1, "pid": [1, 2]},  # unhashable pid: used to crash the reader
        {**flash, "local_idx": "two"},
        {**flash, "local_idx": 3, "judge_score": {"x": 1}},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rollouts_out"], s["quarantined_by_reason"]) == (2, {"wrong type": 2})

    # Any exception while building one row (not just the ones foreseen) stays with that row.
    from ddai.pipelines import ingest as ingest_mod
    from ddai.pipelines.adapters.native import jsonl

    real = ingest_mod.normalize_rollout

    def flaky(rec, **kw):
        if rec.get("uid") == "u1":
            raise KeyError("surprise")
        return real(rec, **kw)

    monkeypatch.setattr(ingest_mod, "normalize_rollout", flaky)

    def columns_fault(*a, **kw):
        raise RuntimeError("columnar fault")

    # a fault of the columnar reader sends its batch to the per-row path, which contains it by row
    monkeypatch.setattr(jsonl, "to_rows", columns_fault)
    native = tmp_path / "n.jsonl"
    native.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(3)))
    code, s = _ingest(tmp_path / "logs2", native)
    assert code == 0, s
    assert s["quarantined_by_reason"] == {"unreadable row": 1}
    (q,) = _quarantine(tmp_path / "logs2", "r")
    assert q["line"] == 2 and q["detail"] == "KeyError: 'surprise'"


def test_a_reader_fault_is_contained_to_its_row():
    def boom() -> base.SourceRecord:
        raise ZeroDivisionError("no")

    rec = base.contained(7, "{}", "r", boom)
    assert (rec.row, rec.line, rec.reason, rec.detail) == (
        None,
        7,
        "unreadable row",
        "ZeroDivisionError: no",
    )


def test_nonfinite_scores_are_kept_null_flagged_and_counted(tmp_path):
    src = tmp_path / "nan.jsonl"
    rows = [_row(0), _row(1, reward=math.nan), _row(2, reward=math.inf, ndcg=-math.inf)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN / Infinity
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rollouts_out"], s["flagged_by_reason"]) == (3, {"nonfinite_score": 2})
    t = store.read_rollouts(tmp_path / "logs", ["r"]).sort_by("uid").to_pylist()
    assert [r["reward"] for r in t] == [1.0, None, None]
    assert [r["flags"] for r in t] == [None, ["nonfinite_score"], ["nonfinite_score"]]
    assert json.loads(t[2]["extra"])["nonfinite"] == {"reward": "inf", "ndcg": "-inf"}
    manifest = json.loads((tmp_path / "logs" / "run_id=r" / "_manifest.json").read_text())
    assert manifest["flagged"] == {"nonfinite_score": 2}


def test_duplicate_rows_and_negative_indices_are_counted_by_reason(tmp_path):
    src = tmp_path / "dups.jsonl"
    lines = [
        json.dumps(_row(0)),
        json.dumps(_row(0)),  # the same line again: quarantined
        json.dumps(_row(1)),
        json.dumps(_row(1, answer="other")),  # same key, other content: kept, flagged
        json.dumps(_row(2, step=1)),
        json.dumps(_row(2, step=2)),  # same uid and index in another step: a different rollout
        json.dumps(_row(3, rollout_idx=-1)),
        json.dumps(_row(4, step=-3)),
    ]
    src.write_text("\n".join(lines) + "\n")
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert s["rows_in"] == 8 and s["rollouts_out"] == 5
    assert s["quarantined_by_reason"] == {"duplicate rollout": 1, "negative index": 2}
    assert s["flagged_by_reason"] == {"duplicate_key": 1}
    q = _quarantine(tmp_path / "logs", "r")
    assert [(r["line"], r["reason"]) for r in q] == [
        (2, "duplicate rollout"),
        (7, "negative index"),
        (8, "negative index"),
    ]
    assert q[1]["detail"] == "rollout_idx = -1"


def test_append_quarantines_rollouts_already_in_the_store(tmp_path):
    logs = tmp_path / "logs"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(3)))
    assert _ingest(logs, first)[1]["rollouts_out"] == 3
    # the same file appended again (an append retried after its commit): recognised by its
    # sources' hashes as stored already; nothing added, no quarantine entry, exit 0
    res = runner.invoke(app, ["ingest", str(first), "--logs", str(logs), "--json", "--append"])
    s = json.loads(res.output)
    assert res.exit_code == 0 and s["rows_in"] == 0 and s["rollouts_out"] == 0
    assert s["already_stored"] == {"r": store.run_manifest(logs, "r")["ingest"]}
    assert store.read_rollouts(logs, ["r"]).num_rows == 3 and _quarantine(logs, "r") == []
    # an overlapping file: u2 again (other content: the stored one stays), u3 new twice (the
    # in-ingest rule), u4 new
    more = tmp_path / "more.jsonl"
    lines = [_row(2, answer="changed"), _row(3), _row(3), _row(4)]
    more.write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, s = _ingest(logs, more, extra=["--append"])
    assert code == 0 and s["rollouts_out"] == 2
    assert s["quarantined_by_reason"] == {
        "duplicate of a stored rollout": 1,
        "duplicate rollout": 1,
    }
    t = store.read_rollouts(logs, ["r"]).sort_by("uid").to_pylist()
    assert [(r["uid"], r["answer"]) for r in t] == [(f"u{i}", "a") for i in range(5)]
    q = _quarantine(logs, "r")
    assert [(e["line"], e["reason"]) for e in q[-2:]] == [
        (1, "duplicate of a stored rollout"),
        (3, "duplicate rollout"),
    ]
    assert "already in run 'r'" in q[-2]["detail"] and '"changed"' in q[-2]["raw"]
    # without --append the run is replaced: nothing counts as stored
    code, s = _ingest(logs, more)
    assert s["rollouts_out"] == 3 and s["quarantined_by_reason"] == {"duplicate rollout": 1}


def test_a_50_mb_first_line_does_not_defeat_format_detection(tmp_path):
    native = tmp_path / "native.jsonl"
    flash = tmp_path / "x_flash_rm_detail.jsonl"
    pad = "p" * 50_000_000
    native.write_text(json.dumps(_row(0, blob=pad)) + "\n" + json.dumps(_row(1)) + "\n")
    first = {"local_idx": 0, "uid": "t", "final_score": 1.0, "generated_answer": pad}
    flash.write_text(json.dumps(first) + "\n")
    assert native.stat().st_size > 50_000_000
    assert adapters.detect(native) == "ddai"
    assert adapters.detect(flash) == "ddai-flash"


# ---------------------------------------------------------------- honest exit codes for model calls


def _rows_for_judge(marker: str = "", marked: set[str] | None = None) -> list[dict]:
    refs = {"u0": "1000", "u1": "Paris"}
    answers = {"u0": "1000", "u1": "paris"}
    return [
        {
            "uid": u,
            "rollout_idx": 0,
            "question": f"question of {u} {marker if marked is None or u in marked else ''}",
            "reference_answer": refs[u],
            "answer": answers[u],
            "judge_score": 0.5,
        }
        for u in ("u0", "u1")
    ]


@pytest.fixture
def fake_judge(tmp_path, monkeypatch):
    """ddai.toml with a judge on the fake server and one on a port where nothing listens."""
    with FakeModelServer(retry_after_s=0.0) as srv:
        cfg = tmp_path / "ddai.toml"
        cfg.write_text(
            f"""
[backends.fake]
kind = "openai"
model = "fake-judge"
base_url = "{srv.openai_base_url}"
api_key_env = "DDAI_C16_KEY"
max_retries = 1
backoff_base_s = 0.01
timeout_s = 5

[backends.down]
kind = "openai"
model = "nobody"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "DDAI_C16_KEY"
max_retries = 1
backoff_base_s = 0.01
timeout_s = 2
""",
            encoding="utf-8",
        )
        monkeypatch.setenv("DDAI_CONFIG", str(cfg))
        monkeypatch.setenv("DDAI_C16_KEY", "k")
        yield srv


def _judge(logs, *args) -> tuple[int, dict]:
    res = runner.invoke(app, ["judge", "--logs", str(logs), "--run", "r1", "--json", *args])
    return res.exit_code, json.loads(res.output)


def _scores(logs, run="r1") -> list:
    t = store.read_rollouts(logs, [run]).sort_by("uid")
    return t.column("judge_score").to_pylist()


def test_judge_with_a_permanent_429_exits_1_writes_nothing_and_caches_the_failure(
    tmp_path, fake_judge
):
    logs = tmp_path / "logs"
    store.write_run(logs, "r1", _rows_for_judge("[[fault:429]]"))
    code, s = _judge(logs, "--judge", "fake")
    assert code == 1
    assert s["failed"] == 2 and s["failed_by_reason"] == {"http-429": 2} and s["scored"] == 0
    assert store.list_runs(logs) == ["r1"]  # no run of null scores
    assert fake_judge.requests == 4  # each call tried twice (max_retries = 1)

    # --in-place: every call fails, every old score stays.
    code, s = _judge(logs, "--judge", "fake", "--in-place")
    assert code == 1 and _scores(logs) == [0.5, 0.5]
    assert fake_judge.requests == 4  # the failures came from the cache: nothing paid twice
    assert s["failed_earlier_cached_not_called_again"] == 2

    # --retry-failed sends them again (still 429 here).
    code, s = _judge(logs, "--judge", "fake", "--in-place", "--retry-failed")
    assert code == 1 and fake_judge.requests == 8 and _scores(logs) == [0.5, 0.5]


def test_judge_in_place_never_replaces_a_score_by_a_failure(tmp_path, fake_judge):
    logs = tmp_path / "logs"
    store.write_run(logs, "r1", _rows_for_judge("[[fault:429]]", marked={"u1"}))
    code, s = _judge(logs, "--judge", "fake", "--in-place")
    assert code == 1 and s["scored"] == 1 and s["failed_by_reason"] == {"http-429": 1}
    t = store.read_rollouts(logs, ["r1"]).sort_by("uid").to_pylist()
    assert [r["judge_score"] for r in t] == [1.0, 0.5]  # u0 rescored, u1 keeps its score
    extra = json.loads(t[1]["extra"])
    assert extra["judge_error"].startswith("http-429") and "prev_judge_score" not in extra


def test_judge_with_the_server_down_exits_1(tmp_path, fake_judge):
    logs = tmp_path / "logs"
    store.write_run(logs, "r1", _rows_for_judge())
    code, s = _judge(logs, "--judge", "down", "--in-place")
    assert code == 1 and s["scored"] == 0 and s["failed"] == 2
    assert set(s["failed_by_reason"]) == {"connection"}
    assert _scores(logs) == [0.5, 0.5]


def test_a_malformed_answer_is_paid_once(tmp_path, fake_judge):
    logs = tmp_path / "logs"
    store.write_run(logs, "r1", _rows_for_judge("[[fault:badjson]]", marked={"u0"}))
    code, s = _judge(logs, "--judge", "fake")
    assert code == 1 and s["scored"] == 1
    paid = fake_judge.requests
    code, s = _judge(logs, "--judge", "fake", "--out-run", "again")
    assert code == 1 and fake_judge.requests == paid  # neither the answer nor the failure re-paid
    assert s["failed_earlier_cached_not_called_again"] == 1


# ---------------------------------------------------------------- typed parameters, run ids, CSV


@pytest.fixture
def uid_logs(tmp_path):
    logs = tmp_path / "logs"
    rows = [{"uid": u, "rollout_idx": 0, "reward": 0.25} for u in ("528", "1e3", "1_000", "x")]
    store.write_run(logs, "r1", rows)
    return logs


def _query(logs, sql, *params) -> tuple[int, list]:
    args = ["query", sql, "--logs", str(logs), "--format", "json"]
    for p in params:
        args += ["-p", p]
    res = runner.invoke(app, args)
    if res.exit_code:
        return res.exit_code, [res.output]
    return 0, [json.loads(line) for line in res.output.splitlines()]


def test_query_parameters_bind_strings_unless_typed(uid_logs):
    sql = "SELECT uid FROM rollouts WHERE uid = $u ORDER BY uid"
    assert _query(uid_logs, sql, "u=528") == (0, [{"uid": "528"}])
    assert _query(uid_logs, sql, "u=1e3") == (0, [{"uid": "1e3"}])  # not 1_000
    assert _query(uid_logs, "SELECT $n + 1 AS v, typeof($n) AS t", "n:int=5") == (
        0,
        [{"v": 6, "t": "INTEGER"}],
    )
    code, rows = _query(
        uid_logs, "SELECT count(*) AS n FROM rollouts WHERE reward < $t", "t:float=0.5"
    )
    assert (code, rows) == (0, [{"n": 4}])
    assert _query(uid_logs, "SELECT NOT $b AS v", "b:bool=false") == (0, [{"v": True}])
    for bad in ("b:bool=maybe", "n:int=five", "x:date=1", "=1", "n:int"):
        code, out = _query(uid_logs, "SELECT 1", bad)
        assert code == 2, (bad, out)


RUN_ID_COMMANDS = [
    ["query", "SELECT 1", "--run", "x'; DROP"],
    ["runs"],  # takes no --run: left out below
    ["report", "--run", "x'; DROP"],
    ["report", "--compare", "a", "x'; DROP"],
    ["judge", "--run", "x'; DROP"],
    ["judge", "--run", "r1", "--out-run", "x'; DROP"],
    ["curate", "bucket", "--dataset", "d.parquet", "--out-dir", "o", "--run", "x'; DROP"],
    ["distill", "--run", "x'; DROP", "--out", "o.parquet"],
    ["value", "score", "--checkpoint", "c", "--run", "x'; DROP"],
    ["ingest", "f.jsonl", "--run-id", "x'; DROP"],
    ["analyze", "latency", "--run", "x'; DROP"],
]


@pytest.mark.parametrize("args", [a for a in RUN_ID_COMMANDS if a != ["runs"]], ids=" ".join)
def test_a_bad_run_id_is_a_usage_error_in_every_command(uid_logs, args):
    res = runner.invoke(app, [*args, "--logs", str(uid_logs)])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.replace("│", " ").split())  # the error panel wraps lines
    assert "not usable as a folder name" in text and "x'; DROP" in text
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_query_csv_cells_cannot_run_as_formulas(uid_logs):
    logs = uid_logs.parent / "logs2"
    evil = ['=HYPERLINK("http://x")', "+1+1", "-2+3+cmd|' /C calc'!A0", "@SUM(A1)", "-0.5"]
    store.write_run(logs, "r1", [{"uid": u, "rollout_idx": 0} for u in evil])
    res = runner.invoke(
        app,
        ["query", "SELECT uid, -1.5 AS neg FROM rollouts", "--logs", str(logs), "--format", "csv"],
    )
    assert res.exit_code == 0, res.output
    rows = list(csv.reader(io.StringIO(res.output)))[1:]
    cells = sorted(r[0] for r in rows)
    assert cells == sorted(["'" + e for e in evil[:4]] + ["-0.5"])  # a plain number stays
    assert {r[1] for r in rows} == {"-1.5"}


def test_review_csv_escapes_formulas_and_reads_back_exactly(tmp_path):
    row = review.ReviewRow(
        uid="=1+1",
        verdict="wrong",
        reason="@ the answer is '=2'",
        decided_by="person",
        proposed_verdict="wrong",
        proposed_reason="-looks wrong",
        rules="zero-score",
        score=0.0,
        ndcg=None,
        question="+what?",
        reference='=HYPERLINK("http://x", "click")',
        pages="",
    )
    text = review.sheet_csv([row])
    rec = next(csv.DictReader(io.StringIO(text)))
    for col in ("uid", "reason", "proposed_reason", "question", "reference"):
        assert rec[col].startswith("'"), col
    path = tmp_path / "review.csv"
    path.write_text(text, encoding="utf-8")
    d = decisions.read_decisions([path])
    assert list(d) == ["=1+1"] and d["=1+1"].reason == "@ the answer is '=2'"
