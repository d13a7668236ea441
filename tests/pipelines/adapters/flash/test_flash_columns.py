"""Flash logs read in columns: the same rollouts and the same quarantine as the per-row path."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import SHARED
from support.columnar import NOT_ROWS, json_line, kinds, odd_line_falls_back, same_store

from ddai.pipelines import store
from ddai.pipelines.adapters import flash as ddai_flash
from ddai.pipelines.adapters import line_batches
from ddai.pipelines.adapters.base import ReaderContext, RowBatch
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import partitions

REAL = SHARED / "ddai-data" / "reconstructed" / "round0_flash_rm_detail.jsonl"
EXAMPLE = SHARED / "ddai-formats" / "examples" / "flash_rm_detail.jsonl"


def _line(i: int, **over) -> str:
    row = {
        "timestamp": 1767571056.5 + i,
        "pid": 4000 + i % 3,
        "uid": f"train_{i // 4}",
        "local_idx": i % 4,
        "sample_idx": i,
        "query": f"What is shown on page {i}?\nassistant\n",
        "generated_answer": str(i),
        "reference_answer": "7",
        "retrieved_basenames": [f"{i}_3", f"{i}_1"],
        "reference_basenames": [f"{i}_3"],
        "judge_score": 1.0 if i % 2 else 0,
        "ndcg": 0.5,
        "final_score": 0.25,
        "latency_s": 1e-05,
        "gemini_raw": '{"score": 1.0}',
        "error": None,
    }
    return json_line(row, **over)


# Lines the per-row path quarantines or converts; each must fall back (its batch only).
ODD = [
    '{"uid": "train_x", "local_idx": 1, "query": "half an emoji \\ud83d", "final_score": 1}',
    '{"uid": "deep", "local_idx": 0, "x": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"uid": "nan", "local_idx": 0, "final_score": NaN}',
    '{"uid": "typed", "local_idx": "3", "final_score": "0.5"}',  # per-row: 3 and 0.5, kept
    '{"uid": "bad", "local_idx": "x"}',
    '{"uid": "neg", "local_idx": -1}',
    '{"local_idx": 2}',
    '{"uid": "", "local_idx": 2}',
    '{"uid": "tab", "local_idx": 0, "query": "a\tb"}',
    *NOT_ROWS,
    '{"uid": "pages", "local_idx": 0, "reference_basenames": ["1_2", 3]}',
    '{"uid": "obj", "local_idx": 0, "meta": {"a": 1}}',
    '{"uid": "run", "local_idx": 0, "run_id": "other"}',
    '{"uid": "huge", "local_idx": 0, "final_score": 1e400}',
    '{"uid": "date", "local_idx": 0, "when": "2026-01-01"}',  # Arrow would read a timestamp
    '{"uid": "twice", "local_idx": 0, "local_idx": 1}',  # Python keeps the last
    '{"uid": "range", "local_idx": 0, "ndcg": 7.5}',  # out of 0..1: quarantined
    '{"uid": "judge", "local_idx": 0, "judge_score": -0.5}',
]


def _same(tmp_path: Path, src: Path, **kw):
    got = same_store(tmp_path, src, sort=False, **kw)
    return got.result, got.rows, got.quarantine


def _batches(src: Path, run_id: str | None = None) -> list[type]:
    return kinds(ddai_flash.read, src, run_id=run_id)


def test_real_round_reads_in_columns_as_per_row(tmp_path):
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    src.write_bytes(REAL.read_bytes() + EXAMPLE.read_bytes())
    res, rows, q = _same(tmp_path, src)
    assert len(rows) == 12_483 and q == [] and res.rows_in == 12_483
    assert set(_batches(src)) == {RowBatch}  # nothing fell back to rows
    ex = rows[-3]  # the example's first line
    assert (ex["uid"], ex["rollout_idx"], ex["flags"]) == ("train_2747", 1, ["duplicate_key"])
    assert ex["extra"] == {
        "error": None,
        "gemini_raw": '{"score": 1.0}',
        "latency_s": 1.84,
        "pid": 41233,
        "timestamp": 1767578452.1,
    }
    assert res.notes[str(src)] == {"lines": 12_483, "writer processes (pid)": 3}


def test_mapping_in_columns(tmp_path):
    src = tmp_path / "r_flash_rm_detail.jsonl"
    lines = [_line(i) for i in range(6)]
    lines[1] = _line(1, error=..., pid=...)  # keys absent: not in extra (null present: kept)
    lines[2] = _line(2, query="no tail", reference_basenames=[], sample_idx=None)
    src.write_text("\n".join(lines) + "\n")
    assert set(_batches(src)) == {RowBatch}
    _, rows, _ = _same(tmp_path, src)
    r0, r1, r2 = rows[0], rows[1], rows[2]
    assert (r0["run_id"], r0["uid"], r0["rollout_idx"], r0["sample_idx"]) == ("r", "train_0", 0, 0)
    assert r0["question"] == "What is shown on page 0?"
    assert r0["file_name"] == "0.pdf" and r0["reference_pages"] == ["0_3"]
    assert r0["retrieved_pages"] == ["0_3", "0_1"] and r0["answer"] == "0"
    assert (r0["judge_score"], r0["ndcg"], r0["reward"]) == (0.0, 0.5, 0.25)
    assert r0["extra"]["error"] is None and "error" in r0["extra"]
    assert "error" not in r1["extra"] and "pid" not in r1["extra"]
    assert r2["question"] == "no tail" and r2["file_name"] is None and r2["sample_idx"] is None
    assert r0["turns"] is None and r0["step"] is None and r0["flags"] is None


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_an_odd_line_falls_back_with_its_batch_only(tmp_path, monkeypatch, odd):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 4096)
    src = tmp_path / "flash_rm_detail.jsonl"
    good = [_line(i) for i in range(60)]
    got = odd_line_falls_back(tmp_path, ddai_flash.read, src, good, ODD[odd], sort=False)
    assert got.result.rows_in == len(got.rows) + len(got.quarantine)


def test_a_score_out_of_range_is_quarantined_and_the_rest_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 4096)
    src = tmp_path / "r_flash_rm_detail.jsonl"
    good = [_line(i) for i in range(60)]
    got = odd_line_falls_back(tmp_path, ddai_flash.read, src, good, _line(99, ndcg=7.5), False)
    assert [(e["line"], e["reason"], e["detail"]) for e in got.quarantine] == [
        (31, "score out of range", "ndcg = 7.5 is outside 0..1")
    ]
    assert len(got.rows) == 60 and all(r["ndcg"] == 0.5 for r in got.rows)
    s = got.result.summary()
    assert (s["rows in"], s["rollouts out"], s["quarantined by reason"]) == (
        61,
        60,
        {"score out of range": 1},
    )


def test_duplicates_in_columns(tmp_path):
    src = tmp_path / "flash_rm_detail.jsonl"
    a, b = _line(1), _line(1, timestamp=5.0)  # the same key: once repeated, once different
    src.write_text("\n".join([_line(0), a, _line(2), a, b]) + "\n")
    res, rows, q = _same(tmp_path, src)
    assert [e["reason"] for e in q] == ["duplicate rollout"] and q[0]["line"] == 4
    assert [r["flags"] for r in rows] == [None, None, None, ["duplicate_key"]]
    assert res.flagged == {"duplicate_key": 1}


def test_unterminated_last_line_and_run_id(tmp_path):
    src = tmp_path / "x_flash_rm_detail.jsonl"
    src.write_text(_line(0) + "\n" + _line(1) + "\n" + _line(2)[:-5])
    _, rows, q = _same(tmp_path, src, run_id="given")
    assert [r["run_id"] for r in rows] == ["given", "given"]
    assert [(e["line"], e["reason"]) for e in q] == [(3, "truncated last line")]


def test_line_batches_number_lines_across_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 64)
    src = tmp_path / "x.jsonl"
    lines = [f'{{"a": {i}}}' for i in range(20)] + ['{"long": "' + "x" * 500 + '"}', '{"a": 9}']
    src.write_text("\n".join(lines) + "\n")
    ctx = ReaderContext()
    with open(src, "rb") as fh:
        got = [rec for b in line_batches.iter_batches(fh, ctx, 64) for rec in b.records()]
    assert [(n, obj) for n, _, obj, _ in got] == [
        (i + 1, json.loads(x)) for i, x in enumerate(lines)
    ]
    assert ctx.bytes_read == src.stat().st_size


def test_row_groups_are_large(tmp_path, monkeypatch):
    monkeypatch.setattr(partitions, "ROW_GROUP_ROWS", 100)
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 8192)  # batches of about 17 rows
    src = tmp_path / "flash_rm_detail.jsonl"
    src.write_text("\n".join(_line(i) for i in range(250)) + "\n")
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    (part,) = store.parquet_files(tmp_path / "logs")
    meta = pq.ParquetFile(part).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 250 and len(sizes) == 3 and min(sizes[:2]) >= 100


def test_append_of_stored_rollouts_in_columns(tmp_path):
    src = tmp_path / "r_flash_rm_detail.jsonl"
    src.write_text("\n".join(_line(i) for i in range(8)) + "\n")
    again = tmp_path / "again" / src.name  # the same rollouts (and run), another file's bytes
    again.parent.mkdir()
    again.write_text("\n".join(_line(i) + " " for i in range(8)) + "\n")
    for columnar in (True, False):
        logs = tmp_path / f"logs-{columnar}"
        ingest(IngestConfig([src], logs, progress=False))
        res = ingest(IngestConfig([again], logs, progress=False, append=True, columnar=columnar))
        assert (res.rows_in, res.rollouts_out) == (8, 0)
        assert res.quarantined == {"duplicate of a stored rollout": 8}
        assert store.run_manifest(logs, "r")["rollouts_total"] == 8
