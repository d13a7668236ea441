"""Native ingest: exact counts, quarantine by reason, replace vs append, derived fields."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA, SCHEMA_VERSION
from ddai.pipelines.store import quarantine, query

RESP = "<think>find it</think>\n<search>q</search><think>done</think><search_complete>true</search_complete>"


def _row(uid="u1", i=0, run="r1", **kw):
    return {"run_id": run, "uid": uid, "rollout_idx": i, "response": RESP, "judge_score": 1.0, **kw}


def _write_jsonl(path: Path, lines: list[bytes | str | dict]) -> Path:
    with open(path, "wb") as fh:
        for x in lines:
            if isinstance(x, dict):
                x = json.dumps(x)
            fh.write(x if isinstance(x, bytes) else x.encode())
    return path


def test_quarantine_every_bad_kind(tmp_path):
    src = _write_jsonl(
        tmp_path / "in.jsonl",
        [
            json.dumps(_row(i=0)) + "\n",
            '{"uid": "u1", "rollout_idx": 1, "run_id": "r1",\n',  # malformed JSON
            json.dumps({"run_id": "r1", "rollout_idx": 2}) + "\n",  # missing uid
            json.dumps(_row(i="two")) + "\n",  # wrong type
            json.dumps(_row(i=3, judge_score=[1])) + "\n",  # wrong type
            b'{"run_id": "r1", "uid": "\xff\xfe", "rollout_idx": 4}\n',  # non-UTF-8
            "\n",  # blank: skipped, not a row
            json.dumps(_row(i=5)) + "\n",
            '{"run_id": "r1", "uid": "u9", "rollout_i',  # truncated last line
        ],
    )
    logs = tmp_path / "logs"
    res = ingest(IngestConfig([src], logs, progress=False))
    assert res.rows_in == 8
    assert res.rollouts_out == 2
    assert dict(res.quarantined) == {
        "malformed JSON": 1,
        "missing required key": 1,
        "wrong type": 2,
        "non-UTF-8 bytes": 1,
        "truncated last line": 1,
    }
    assert res.rows_in == res.rollouts_out + sum(res.quarantined.values())
    q = [json.loads(x) for x in quarantine.read(logs, "r1").decode().splitlines()]
    assert [x["line"] for x in q] == [2, 3, 4, 5, 6, 9]
    assert {x["reason"] for x in q} == set(res.quarantined)
    assert all(x["source"] == str(src) and x["raw"] for x in q)
    assert "rollout_i" in q[-1]["raw"]
    # the reader ignores _quarantine and the manifest
    tbl = store.read_rollouts(logs)
    assert tbl.num_rows == 2 and tbl.schema.equals(ROLLOUT_SCHEMA, check_metadata=False)
    man = store.run_manifest(logs, "r1")
    assert (
        man["rows_in"] == 8 and man["rollouts_out"] == 2 and man["quarantined"]["wrong type"] == 2
    )
    assert man["sources"][0]["sha256"]


def test_parquet_files_carry_schema_version(tmp_path):
    src = _write_jsonl(tmp_path / "a.jsonl", [json.dumps(_row(i=i)) + "\n" for i in range(3)])
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    (f,) = store.parquet_files(tmp_path / "logs")
    meta = pq.read_schema(f).metadata
    assert meta[b"schema_version"] == SCHEMA_VERSION.encode()
    assert pq.ParquetFile(f).metadata.row_group(0).column(0).compression == "ZSTD"


def test_derived_fields_and_extra(tmp_path):
    src = _write_jsonl(
        tmp_path / "a.jsonl", [json.dumps(_row(custom_field={"a": 1}, run="orig")) + "\n"]
    )
    logs = tmp_path / "logs"
    ingest(IngestConfig([src], logs, run_id="mine", progress=False))
    (r,) = store.read_rollouts(logs).to_pylist()
    assert r["run_id"] == "mine"
    assert r["num_turns"] == 2 and r["terminated"] == "complete" and r["format_ok"] is True
    assert [t["action"] for t in r["turns"]] == ["search", "search_complete"]
    assert r["turns"][0]["sep"] == "\n"
    extra = json.loads(r["extra"])
    assert extra == {"custom_field": {"a": 1}, "source_run_id": "orig"}


def test_reingest_replaces_and_append_appends(tmp_path):
    logs = tmp_path / "logs"
    a = _write_jsonl(tmp_path / "a.jsonl", [json.dumps(_row(i=i)) + "\n" for i in range(3)])
    b = _write_jsonl(
        tmp_path / "b.jsonl", [json.dumps(_row(i=i, uid="u2")) + "\n" for i in range(2)]
    )
    ingest(IngestConfig([a], logs, progress=False))
    ingest(IngestConfig([a], logs, progress=False))
    assert store.read_rollouts(logs).num_rows == 3
    ingest(IngestConfig([b], logs, progress=False, append=True))
    assert store.read_rollouts(logs).num_rows == 5
    assert store.run_manifest(logs, "r1")["rollouts_total"] == 5
    ingest(IngestConfig([b], logs, progress=False))
    assert store.read_rollouts(logs).num_rows == 2


def test_parquet_source_and_several_runs(tmp_path):
    logs1 = tmp_path / "l1"
    rows = [_row(i=i, run="ra") for i in range(2)] + [_row(i=0, run="rb")]
    src = _write_jsonl(tmp_path / "a.jsonl", [json.dumps(r) + "\n" for r in rows])
    ingest(IngestConfig([src], logs1, progress=False))
    assert store.list_runs(logs1) == ["ra", "rb"]
    # export one run to Parquet and re-ingest it: same rows
    (f,) = store.parquet_files(logs1, ["ra"])
    logs2 = tmp_path / "l2"
    res = ingest(IngestConfig([f], logs2, progress=False))
    assert res.formats[str(f)] == "ddai"
    assert store.read_rollouts(logs2).to_pylist() == store.read_rollouts(logs1, ["ra"]).to_pylist()


def test_unknown_run_and_unknown_format(tmp_path):
    src = _write_jsonl(tmp_path / "a.jsonl", [json.dumps(_row()) + "\n"])
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    with pytest.raises(FileNotFoundError, match="known runs: r1"):
        store.read_rollouts(tmp_path / "logs", ["nope"])
    weird = tmp_path / "w.jsonl"
    weird.write_text('{"event": 1}\n')
    with pytest.raises(ValueError, match="--input-format"):
        ingest(IngestConfig([weird], tmp_path / "logs", progress=False))


def test_query_views_on_ingested(tmp_path):
    rows = [_row(i=i, judge_score=float(i < 2)) for i in range(4)]
    rows += [_row(uid="u2", i=i, judge_score=1.0) for i in range(2)]
    src = _write_jsonl(tmp_path / "a.jsonl", [json.dumps(r) + "\n" for r in rows])
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    con = query.connect(tmp_path / "logs")
    got = dict(con.execute("SELECT uid, success_rate FROM prompts ORDER BY uid").fetchall())
    assert got == {"u1": 0.5, "u2": 1.0}
    mixed = dict(con.execute("SELECT uid, mixed FROM prompts").fetchall())
    assert mixed == {"u1": True, "u2": False}
    assert con.execute("SELECT count(*) FROM turns").fetchone()[0] == 12
    assert con.execute("SELECT run_id, count(*) FROM rollouts GROUP BY 1").fetchall() == [("r1", 6)]
    # a bound parameter, never pasted into the SQL text
    n = con.execute(
        "SELECT count(*) FROM prompts_at($t) WHERE n_success = 0", {"t": 2.0}
    ).fetchone()
    assert n[0] == 2


def test_discrepancy_classes(tmp_path):
    base = {"reference_pages": ["7_2"]}
    rows = [
        _row(i=0, judge_score=1.0, ndcg=0.0, retrieved_pages=["7_5"], **base),  # same document
        _row(i=1, judge_score=0.5, ndcg=0.0, retrieved_pages=["8_1"], **base),  # other document
        _row(i=2, judge_score=0.0, ndcg=1.0, retrieved_pages=["7_2"], **base),  # answer wrong
        _row(i=3, judge_score=0.4, ndcg=0.0, retrieved_pages=["8_1"], **base),  # agree: both low
        _row(i=4, judge_score=1.0, ndcg=1.0, retrieved_pages=["7_2"], **base),  # agree: both high
    ]
    src = _write_jsonl(tmp_path / "a.jsonl", [json.dumps(r) + "\n" for r in rows])
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    con = query.connect(tmp_path / "logs")
    got = con.execute("SELECT rollout_idx, class FROM discrepancies ORDER BY 1").fetchall()
    assert got == [
        (0, "same_doc_success"),
        (1, "no_reference_doc"),
        (2, "retrieval_ok_answer_wrong"),
    ]
    assert con.execute("SELECT page_doc('12_3'), page_doc('a_b_9')").fetchone() == ("12", "a_b")
