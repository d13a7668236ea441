"""Distill's projected read and row fetch: the same selection and the same rows as reading the
whole run, across parts, row groups, runs, batches and a part that predates a column."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.fetch_rows import fetch_rows

from ddai.pipelines import store
from ddai.pipelines.distill import fetch
from ddai.pipelines.distill import select as sel_mod
from ddai.pipelines.distill.select import SelectConfig, select
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA, normalize_rollout, to_table

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
    assert fetch_rows(files, keys, got.rows) == full.take(got.rows).to_pylist()


def test_fetch_keeps_the_asked_order_across_files_and_row_groups(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    keys = fetch.selection_columns(files)
    full = store.read_rollouts(logs)
    rows = [23, 0, 15, 4, 11, 9, 16]  # every file, several row groups, out of order
    got = fetch_rows(files, keys, rows)
    assert [(r["run_id"], r["uid"], r["rollout_idx"]) for r in got] == [
        (full["run_id"][i].as_py(), full["uid"][i].as_py(), full["rollout_idx"][i].as_py())
        for i in rows
    ]
    assert got == full.take(rows).to_pylist()
    # streamed back in batches smaller than the selection: the same rows in the same order
    assert fetch_rows(files, keys, rows, batch_rows=2) == got
    assert fetch_rows(files, keys, []) == []


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


def _reference(rows: list[dict], cfg: SelectConfig) -> tuple[list[int], dict[str, int]]:
    """The selection rule written out row by row (select.py's docstring), for comparison."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["run_id"], r["uid"]), []).append(i)
    dropped: dict[str, int] = {}

    def drop(reason: str, n: int = 1) -> None:
        dropped[reason] = dropped.get(reason, 0) + n

    def ok(r: dict) -> bool:
        j = r["judge_score"]
        return j is not None and j >= cfg.success_threshold and r["format_ok"] is not False

    def desc(v):  # descending, nulls last
        return (v is None, -(v or 0.0))

    kept: list[int] = []
    for idx in groups.values():  # in order of first appearance
        judged = [i for i in idx if rows[i]["judge_score"] is not None]
        wins = [i for i in idx if ok(rows[i])]
        if not judged:
            drop(sel_mod.NO_JUDGED, len(idx))
        elif not wins:
            drop(sel_mod.NO_SUCCESS, len(idx))
        elif len(wins) / len(judged) > cfg.rate_max:
            drop(sel_mod.RATE_ABOVE_MAX, len(idx))
        else:
            if len(idx) > len(wins):
                drop(sel_mod.NOT_SUCCESS, len(idx) - len(wins))
            clean = []
            for i in wins:
                flags = rows[i]["flags"] or []
                if flags:
                    drop(sel_mod.FLAGGED + flags[0])
                else:
                    clean.append(i)
            r = rows

            def key(i, r=r):
                n_act = r[i]["num_turns"] if r[i]["num_turns"] is not None else len(r[i]["turns"])
                nulls = [(r[i][c] is None, r[i][c] or 0) for c in ("step", "sample_idx")]
                return (*desc(r[i]["reward"]), *desc(r[i]["ndcg"]), n_act, r[i]["rollout_idx"],
                        *nulls, i)  # fmt: skip

            ranked = sorted(clean, key=key)
            kept += ranked[: cfg.top_k]
            if len(ranked) > cfg.top_k:
                drop(sel_mod.BEYOND_TOP_K, len(ranked) - cfg.top_k)
    return kept, dropped


def _random_store(tmp_path, seed: int):
    """Two runs over several parts with null scores, missing format gates, flags, ties, and
    uids shared across runs."""
    rng = random.Random(seed)
    logs = tmp_path / f"logs{seed}"
    for run in ("a", "b"):
        for _part in range(2):
            rows = []
            for _ in range(rng.randint(1, 40)):
                r = roll(f"p{rng.randint(0, 6)}", rng.randint(0, 5), rng.choice([None, 0.0, 1.0, 1.0]),
                         ndcg=rng.choice([0.0, 0.5, 1.0]), turns=rng.randint(1, 3), run=run)  # fmt: skip
                r["reward"] = rng.choice([None, 0.0, 0.5, 1.0])
                r["format_ok"] = rng.choice([None, True, True, False])
                r["step"] = rng.randint(0, 1)
                if rng.random() < 0.15:
                    r["flags"] = ["turns_incomplete"]
                rows.append(r)
            _write_part(logs, run, rows, row_group_size=7)
    return logs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "cfg", [SelectConfig(), SelectConfig(rate_max=1.0, top_k=1), SelectConfig(0.5, 0.3, 2)]
)
def test_duckdb_selection_is_the_rule_and_the_columnar_one(tmp_path, seed, cfg):
    logs = _random_store(tmp_path, seed)
    files = store.parquet_files(logs)
    full = store.read_rollouts(logs)
    rows = full.to_pylist()
    want_rows, want_dropped = _reference(rows, cfg)
    got, wanted, n_read = fetch.scan_select(files, cfg)
    columnar = select(fetch.selection_columns(files), cfg)
    assert n_read == len(rows)
    assert got.rows == columnar.rows == want_rows
    assert got.dropped == columnar.dropped == want_dropped
    assert got.prompts == columnar.prompts
    assert got.prompts["seen"] == len({(r["run_id"], r["uid"]) for r in rows})
    assert got.prompts["kept"] == len({(rows[i]["run_id"], rows[i]["uid"]) for i in want_rows})
    # the locators point at the same rows, and fetching them gives the full rows
    assert wanted.equals(fetch.locate(files, fetch.selection_columns(files), got.rows))
    assert fetch_rows(files, fetch.selection_columns(files), got.rows) == [
        rows[i] for i in got.rows
    ]


def test_duckdb_selection_reads_turn_counts_where_num_turns_is_null(tmp_path):
    logs = tmp_path / "logs"
    table = to_table([roll("p", i, 1.0, turns=3 - i) for i in range(3)])
    table = table.set_column(
        table.schema.get_field_index("num_turns"), "num_turns", pa.nulls(3, pa.int32())
    )
    store.write_run(logs, "r", table)
    sel, _, _ = fetch.scan_select(store.parquet_files(logs), SelectConfig(rate_max=1.0, top_k=1))
    assert sel.rows == [2]  # the one-turn rollout: fewer actions first


def test_batches_are_bounded_and_cover_the_selection_once(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    keys = fetch.selection_columns(files)
    rows = [23, 0, 15, 4, 11, 9, 16]
    parts = list(
        fetch.fetch_batches(files, fetch.locate(files, keys, rows), columns=("uid", "turns"),
                            batch_rows=3)
    )  # fmt: skip
    assert all(p.num_rows <= 3 for p in parts)
    assert all(p.column_names == ["uid", "turns", "_slot"] for p in parts)
    got = pa.concat_tables(parts).sort_by("_slot")
    assert got["_slot"].to_pylist() == list(range(len(rows)))
    full = store.read_rollouts(logs)
    assert got["uid"].to_pylist() == full["uid"].take(rows).to_pylist()
    assert got["turns"].to_pylist() == full["turns"].take(rows).to_pylist()


def test_a_selected_row_missing_from_its_file_is_an_error(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    wanted = fetch.locate(files, fetch.selection_columns(files), [0, 1])
    wanted = wanted.set_column(1, "_row", pa.array([0, 999], pa.int64()))
    with pytest.raises(RuntimeError, match="1 selected rollouts were not found"):
        list(fetch.fetch_batches(files, wanted))


def test_turn_fields_keep_only_what_the_rebuild_reads(tmp_path):
    logs = _store(tmp_path)
    files = store.parquet_files(logs)
    keys = fetch.selection_columns(files)
    rows = [5, 17, 2]
    wanted = fetch.locate(files, keys, rows)
    keep = ("idx", "action", "observation")
    parts = list(fetch.fetch_batches(files, wanted, columns=("turns",), turn_fields=keep,
                                     batch_rows=2))  # fmt: skip
    got = pa.concat_tables(parts).sort_by("_slot")["turns"].to_pylist()
    full = store.read_rollouts(logs)["turns"].take(rows).to_pylist()
    assert got == [[{k: t[k] for k in keep} for t in turns] for turns in full]
    assert any(len(turns) > 1 for turns in got)


@pytest.mark.parametrize("scan", ["arrow", "fsspec"])
def test_selection_and_rows_on_object_storage_equal_the_local_ones(
    s3_env, tmp_path, monkeypatch, scan
):
    from ddai.pipelines.ingest import IngestConfig, ingest
    from ddai.pipelines.store import objstore

    # the same JSONL parts (null scores and format gates, ties, two runs) ingested into a local
    # store and one on S3
    keep = ("uid", "rollout_idx", "step", "response", "judge_score", "ndcg", "reward", "format_ok")
    local, remote = tmp_path / "local", f"{s3_env}/logs"
    rows = store.read_rollouts(_random_store(tmp_path, 3)).to_pylist()
    for k, run in enumerate(("a", "b")):
        mine = [{c: r[c] for c in keep} for r in rows if r["run_id"] == run]
        for half in (mine[: len(mine) // 2], mine[len(mine) // 2 :]):
            src = tmp_path / f"{run}{k}{len(half)}.jsonl"
            src.write_text("".join(json.dumps(r) + "\n" for r in half))
            for logs in (local, remote):
                append = run in store.list_runs(logs)
                ingest(IngestConfig([src], logs, run_id=run, append=append, progress=False))
    monkeypatch.setenv(objstore.SCAN_ENV, scan)
    cfg = SelectConfig(rate_max=1.0, top_k=2)
    files_l, files_r = store.parquet_files(local), store.parquet_files(remote)
    assert len(files_r) == len(files_l) == 4
    want, wanted_l, n_l = fetch.scan_select(files_l, cfg)
    got, wanted_r, n_r = fetch.scan_select(files_r, cfg)
    assert (got.rows, got.dropped, got.prompts, n_r) == (want.rows, want.dropped, want.prompts, n_l)
    assert len(got.rows) >= 4

    def rows(files, wanted):
        parts = fetch.fetch_batches(files, wanted, columns=fetch.REBUILD_COLUMNS)
        table = pa.concat_tables(list(parts)).sort_by("_slot").drop_columns(["_slot"])
        return table.to_pylist()

    assert rows(files_r, wanted_r) == rows(files_l, wanted_l)
