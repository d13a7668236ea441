"""ddai's own Parquet read in columns: the same rollouts and quarantine as the per-row path."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES
from support.columnar import kinds, same_store

from ddai.pipelines import store
from ddai.pipelines.adapters import native
from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    """The fixture runs as ddai wrote them (turns parsed, fields derived), as dicts."""
    logs = tmp_path_factory.mktemp("seed")
    ingest(IngestConfig(sorted((FIXTURES / "logs").glob("*.jsonl")), logs, progress=False))
    return store.read_rollouts(logs).to_pylist()


def _write(path: Path, rows: list[dict], schema: pa.Schema = ROLLOUT_SCHEMA) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _same(tmp_path: Path, src: Path, **kw):
    got = same_store(tmp_path, src, **kw)
    return got.result, got.rows, got.quarantine


def _kinds(src: Path, run_id: str | None = None) -> list[type]:
    return kinds(native.read, src, run_id=run_id)


def test_store_rows_read_in_columns_as_per_row(tmp_path, rows):
    src = _write(tmp_path / "rollouts.parquet", rows)
    assert set(_kinds(src)) == {RowBatch}
    res, out, q = _same(tmp_path, src)
    assert len(out) == len(rows) and q == [] and res.rows_in == len(rows)


def test_run_id_over_the_rows_own(tmp_path, rows):
    src = _write(tmp_path / "rollouts.parquet", rows)
    assert set(_kinds(src, "mine")) == {RowBatch}
    _, out, _ = _same(tmp_path, src, run_id="mine")
    assert {r["run_id"] for r in out} == {"mine"}
    assert {r["extra"]["source_run_id"] for r in out} == {r["run_id"] for r in rows}


def test_derived_fields_and_repeats(tmp_path, rows):
    some = [dict(r) for r in rows[:20]]
    for r in some[:5]:
        r.update(num_turns=None, terminated=None, format_ok=None)
    some.append(dict(some[7]))  # an exact repeat: quarantined
    some.append({**some[8], "reward": 0.123})  # same key, other content: flagged
    src = _write(tmp_path / "rollouts.parquet", some)
    assert set(_kinds(src)) == {RowBatch}
    res, out, q = _same(tmp_path, src)
    assert [e["reason"] for e in q] == ["duplicate rollout"] and q[0]["line"] == 21
    assert res.flagged == {"duplicate_key": 1}
    assert all(r["num_turns"] is not None and r["terminated"] for r in out)


ODD = {
    "nonfinite": {"reward": float("nan")},
    "negative": {"rollout_idx": -1},
    "no uid": {"uid": None},
    "empty run": {"run_id": ""},
    "bad run": {"run_id": "a/b"},
    "parse": {"turns": None, "response": "<think>t</think><search>q</search>"},
    "extra list": {"extra": "[1, 2]"},
    "extra text": {"extra": "not json"},
    "flags": {"flags": ["b", "a", "b"]},
    "terminated": {"terminated": "stopped"},
    "null page": {"reference_pages": ["a", None]},
    "ndcg out of range": {"ndcg": 7.5},
    "judge out of range": {"judge_score": -1.0},
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_an_odd_row_sends_its_batch_by_rows(tmp_path, rows, name):
    some = [dict(r) for r in rows[:10]]
    some[4].update(ODD[name])
    src = _write(tmp_path / "rollouts.parquet", some)
    assert RowBatch not in _kinds(src)
    res, out, q = _same(tmp_path, src)
    assert res.rows_in == len(out) + len(q) == 10


def test_a_score_out_of_range_is_quarantined_and_the_rest_stored(tmp_path, rows):
    some = [dict(r) for r in rows[:10]]
    some[4]["ndcg"] = 7.5
    src = _write(tmp_path / "rollouts.parquet", some)
    assert RowBatch not in _kinds(src)  # the batch goes by rows, where the row is refused
    res, out, q = _same(tmp_path, src)
    assert [(e["line"], e["reason"], e["detail"]) for e in q] == [
        (5, "score out of range", "ndcg = 7.5 is outside 0..1")
    ]
    assert len(out) == 9 and all(0 <= r["ndcg"] <= 1 for r in out if r["ndcg"] is not None)
    s = res.summary()
    assert (s["rows in"], s["rollouts out"], s["quarantined by reason"]) == (
        10,
        9,
        {"score out of range": 1},
    )


def test_a_column_the_log_lacks_goes_by_rows(tmp_path, rows):
    some = [{**r, "note": "x"} for r in rows[:5]]
    schema = ROLLOUT_SCHEMA.append(pa.field("note", pa.string()))
    src = _write(tmp_path / "rollouts.parquet", some, schema)
    assert RowBatch not in _kinds(src)
    _, out, _ = _same(tmp_path, src)
    assert {r["extra"]["note"] for r in out} == {"x"}


def test_extra_once_per_distinct_pair():
    from ddai.pipelines.adapters.native import parquet

    extra = ['{"a": 1}', None, '{"a": 1}', "", "{}", '{"a": 1}', '{"b":[1, 2]}', None]
    runs = ["x", "x", "y", None, "x", "x", "y", "y"]
    table = pa.table({"extra": pa.array(extra, pa.string()), "run_id": pa.array(runs)})
    pairs, at = parquet._distinct_pairs(table["extra"], table["run_id"])
    assert pairs.num_rows == 7  # ('{"a": 1}', "x") twice
    assert [pairs.slice(i, 1).to_pylist()[0] for i in at.to_pylist()] == [
        {"e": e, "r": r} for e, r in zip(extra, runs, strict=True)
    ]
    # rows whose own run is not --run-id's get source_run_id; DuckDB writes the merged JSON
    got = parquet._extra(table, "x").to_pylist()
    assert got == [
        '{"a": 1}',
        "{}",
        '{"a":1,"source_run_id":"y"}',
        "{}",
        "{}",
        '{"a": 1}',
        '{"b":[1,2],"source_run_id":"y"}',
        '{"source_run_id":"y"}',
    ]
    bad = pa.table({"extra": pa.array(["{}", "[1]"]), "run_id": pa.array(["x", "x"])})
    assert parquet._extra(bad, None) is None  # not an object: the batch goes by rows


def test_columns_not_derived_stay_the_source_arrays(rows):
    """Only the derived columns go through polars: the others are the batch's own Arrow buffers
    (no copy of the turns, the answers and the pages per batch)."""
    from ddai.pipelines.adapters.native import parquet

    some = [dict(r) for r in rows[:12]]
    for r in some[:4]:
        r.update(num_turns=None, terminated=None)
    batch = pa.Table.from_pylist(some, schema=ROLLOUT_SCHEMA).combine_chunks().to_batches()[0]
    df = parquet.frame(batch)
    (got,) = parquet.to_rows(batch, None, 1, parquet.digests(df), df)
    for name in ("question", "turns", "answer", "reference_pages", "reward_parts"):
        src, out = batch.column(name), got.table[name].chunk(0)
        assert [b.address for b in src.buffers() if b] == [b.address for b in out.buffers() if b]
    assert got.table["num_turns"].to_pylist()[:4] == [len(r["turns"]) for r in some[:4]]
    assert got.table["terminated"].null_count == 0
    assert got.table.schema == ROLLOUT_SCHEMA


def test_one_row_hash_per_digest(rows):
    """Each row's digest is one seeded 64-bit polars row hash (8 bytes): equal rows share it,
    a row differing in one nested value does not."""
    import polars as pl

    from ddai.pipelines.adapters.native import parquet

    some = [dict(r) for r in rows[:3]]
    turns = [dict(t) for t in some[0]["turns"]]
    turns[-1] = {**turns[-1], "think": (turns[-1]["think"] or "") + "."}
    some += [dict(some[0]), {**some[0], "turns": turns}]
    batch = pa.Table.from_pylist(some, schema=ROLLOUT_SCHEMA).to_batches()[0]
    df = parquet.frame(batch)
    got = parquet.digests(df)
    want = df.hash_rows(seed=11).to_list()
    assert got == [h.to_bytes(8, "little") for h in want]
    assert got[3] == got[0] and got[4] != got[0] and len(set(got)) == 4
    assert isinstance(df, pl.DataFrame) and df.height == 5


def test_batches_decoded_and_digested_ahead_by_a_thread(tmp_path, rows, monkeypatch):
    """Each batch is framed and digested in the read-ahead thread, checked in the consumer's;
    the rows and their order are those of the file."""
    import threading

    from ddai.pipelines.adapters.native import parquet

    framed: list[int] = []
    frame = parquet.frame

    def spy(batch):
        framed.append(threading.get_ident())
        return frame(batch)

    monkeypatch.setattr(parquet, "frame", spy)
    monkeypatch.setattr(native, "PARQUET_BATCH", 7)
    src = tmp_path / "rollouts.parquet"
    pq.write_table(pa.Table.from_pylist(rows[:30], schema=ROLLOUT_SCHEMA), src, row_group_size=4)
    got = list(native.read(src, native.ReaderContext(columnar=True)))
    assert {type(b) for b in got} == {RowBatch}
    assert len(framed) == 5 and threading.get_ident() not in framed
    lines = [n for b in got for n in b.lines]
    assert lines == list(range(1, 31))
    assert [u for b in got for u in b.table["uid"].to_pylist()] == [r["uid"] for r in rows[:30]]
