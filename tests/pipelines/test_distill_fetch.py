"""Distill's projected read and row fetch: the same selection and the same rows as reading the
whole run, across parts, row groups, runs, batches and a part that predates a column."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ddai.pipelines import store
from ddai.pipelines.distill import fetch
from ddai.pipelines.distill.select import SelectConfig, select
from ddai.pipelines.schema import ROLLOUT_SCHEMA, normalize_rollout, to_table

DONE = "<think>done</think>\n<search_complete>true</search_complete>"
SEARCH = "<think>look</think>\n<search>q</search>"


def roll(uid, i, judge, *, ndcg=0.0, turns=1, run="a"):
    response = SEARCH * (turns - 1) + DONE
    rec = {"run_id": run, "step": 0, "uid": uid, "rollout_idx": i, "response": response}
    return normalize_rollout({**rec, "judge_score": judge, "ndcg": ndcg, "reward": judge})


def _write_part(logs, run, rows, *, row_group_size=3, drop=()):
    """Commit ``rows`` as one more Parquet part of ``run`` in small row groups (so fetches cross
    row groups); ``drop``: rewrite the part without those columns (a part written before them)."""
    before = set(store.parquet_files(logs, [run])) if run in store.list_runs(logs) else set()
    w = store.PartitionWriter(logs, run, append=bool(before), batch_rows=row_group_size)
    for r in rows:
        w.add(r)
    w.commit({"sources": []})
    (part,) = set(store.parquet_files(logs, [run])) - before
    if drop:
        old = pq.read_table(part)
        pq.write_table(old.drop_columns(list(drop)), part, row_group_size=row_group_size)


def _store(tmp_path):
    logs = tmp_path / "logs"
    a = [roll(f"p{i // 4}", i % 4, float(i % 3 == 0), ndcg=i / 20, turns=1 + i % 3) for i in range(16)]  # fmt: skip
    b = [roll(f"p{i // 4}", i % 4, float(i % 2 == 0), turns=2, run="b") for i in range(8)]
    _write_part(logs, "a", a[:10])
    _write_part(logs, "a", a[10:], drop=("flags",))  # an older part
    _write_part(logs, "b", b, row_group_size=5)
    return logs


def test_selection_columns_are_the_log_in_order_with_locators(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    keys = fetch.selection_columns(files)
    full = store.read_rollouts(logs)
    assert keys.num_rows == full.num_rows == 24
    for c in ("uid", "rollout_idx", "run_id", "judge_score", "num_turns"):
        assert keys[c].to_pylist() == full[c].to_pylist()
    assert keys["_file"].to_pylist() == [0] * 10 + [1] * 6 + [2] * 8
    assert keys["_file_row"].to_pylist() == [*range(10), *range(6), *range(8)]
    # ``flags`` is missing from part-2: typed nulls, like the dataset reader
    assert keys["flags"].type == ROLLOUT_SCHEMA.field("flags").type
    assert keys["flags"].to_pylist()[10:16] == [None] * 6
    # num_turns is never null here, so the turns column was not read
    assert keys["n_turns"].null_count == keys.num_rows
    assert "turns" not in keys.column_names and "response" not in keys.column_names


def test_same_selection_and_rows_as_the_full_read(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    keys = fetch.selection_columns(files)
    full = store.read_rollouts(logs)
    cfg = SelectConfig(rate_max=0.5, top_k=2)
    want, got = select(full, cfg), select(keys, cfg)
    assert got.rows == want.rows and got.dropped == want.dropped and got.prompts == want.prompts
    assert len(got.rows) >= 4
    assert fetch.fetch_rows(files, keys, got.rows) == full.take(got.rows).to_pylist()


def test_fetch_keeps_the_asked_order_across_files_and_row_groups(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    keys = fetch.selection_columns(files)
    full = store.read_rollouts(logs)
    rows = [23, 0, 15, 4, 11, 9, 16]  # every file, several row groups, out of order
    got = fetch.fetch_rows(files, keys, rows)
    assert [(r["run_id"], r["uid"], r["rollout_idx"]) for r in got] == [
        (full["run_id"][i].as_py(), full["uid"][i].as_py(), full["rollout_idx"][i].as_py())
        for i in rows
    ]
    assert got == full.take(rows).to_pylist()
    # streamed back in batches smaller than the selection: the same rows in the same order
    assert fetch.fetch_rows(files, keys, rows, batch_rows=2) == got
    assert fetch.fetch_rows(files, keys, []) == []


def test_turn_count_is_read_where_num_turns_is_null(tmp_path):
    logs = tmp_path / "logs"
    rows = [roll("p", i, 1.0, turns=i + 1) for i in range(3)]
    table = to_table(rows)
    table = table.set_column(
        table.schema.get_field_index("num_turns"), "num_turns", pa.nulls(3, pa.int32())
    )
    store.write_run(logs, "r", table)
    keys = fetch.selection_columns(store.parquet_files(logs))
    assert keys["n_turns"].to_pylist() == [1, 2, 3]
    # fewer actions first: the one-turn rollout ranks first among equal rewards
    assert select(keys, SelectConfig(rate_max=1.0, top_k=1)).rows == [0]
