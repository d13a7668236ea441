"""Distill's two reads: the few columns selection ranks on, then the selected rollouts' full rows.

Selection needs nine scalar columns of every rollout, the full rows (turns, response, observation
text) only of the rollouts it keeps; reading the whole run first held every column of every
rollout in memory. ``selection_columns`` scans the run's Parquet files for those columns (DuckDB,
projection pushed into the scan) with each rollout's file and row number; ``fetch_rows`` then
joins the scan to the selected (file, row number) pairs, so DuckDB materializes only those rows
and hands them back in batches: memory follows the selection, not the run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from ddai.pipelines import objstore
from ddai.pipelines.schema import ROLLOUT_SCHEMA

# What selection reads (``select.py``), besides the turn count it needs where num_turns is null.
COLUMNS = (
    "run_id",
    "step",
    "uid",
    "rollout_idx",
    "sample_idx",
    "judge_score",
    "format_ok",
    "reward",
    "ndcg",
    "num_turns",
    "flags",
)
FILE, FILE_ROW = "_file", "_file_row"


SCAN = "read_parquet($files, union_by_name = true, filename = true, file_row_number = true)"


def selection_columns(
    files: Sequence[str | os.PathLike[str]], *, threads: int | None = None
) -> pa.Table:
    """The selection columns of every rollout in ``files``, in log order (file, then row).

    Adds ``n_turns`` (the parsed turn count, read only when some ``num_turns`` is null), ``_file``
    (index into ``files``) and ``_file_row`` (the row's number in its file)."""
    paths = [str(f) for f in files]
    if not paths:  # a run with no rollouts
        empty = ROLLOUT_SCHEMA.empty_table().select(list(COLUMNS))
        return (
            empty.append_column("n_turns", pa.array([], pa.int32()))
            .append_column(FILE, pa.array([], pa.int32()))
            .append_column(FILE_ROW, pa.array([], pa.int64()))
        )
    if objstore.is_url(paths[0]) and objstore.scan() == "arrow":
        return _remote_selection_columns(paths)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    objstore.register(con, paths)  # object-storage URLs read through fsspec
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    params = {"files": paths}
    have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {SCAN}", params).fetchall()}
    # A column no file carries (``flags`` before schema 2) reads as typed nulls.
    cols = [c if c in have else f"CAST(NULL AS {_duck_type(c)}) AS {c}" for c in COLUMNS]
    sql = (
        f"SELECT {', '.join(cols)}, "
        f"CAST(list_position($files, filename) - 1 AS INTEGER) AS {FILE}, "
        f"file_row_number AS {FILE_ROW} FROM {SCAN}"
    )
    table = con.sql(sql, params=params).to_arrow_table()
    n_turns: pa.Array | pa.ChunkedArray = pa.nulls(table.num_rows, pa.int32())
    if "turns" in have and table["num_turns"].null_count:
        # Only then is the (large) turns column read, and only its lengths are kept.
        sql = f"SELECT CAST(len(turns) AS INTEGER) AS n FROM {SCAN}"
        n_turns = con.sql(sql, params=params).to_arrow_table()["n"]
    con.close()
    return table.append_column("n_turns", n_turns)


def _remote_selection_columns(urls: list[str]) -> pa.Table:
    """``selection_columns`` over object-storage files, read by pyarrow's C++ filesystem (DuckDB
    could only pull them through fsspec, several times slower: bench/bench_objstore.py), one
    file at a time with its row numbers."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs = objstore.arrow_fs(urls[0])
    parts = []
    for i, url in enumerate(urls):
        pf = pq.ParquetFile(fs.open_input_file(objstore.key_of(url)))
        have = set(pf.schema_arrow.names)
        t = pf.read(columns=[c for c in COLUMNS if c in have])
        n = t.num_rows
        cols = [t[c] if c in have else pa.nulls(n, ROLLOUT_SCHEMA.field(c).type) for c in COLUMNS]
        n_turns: pa.Array | pa.ChunkedArray = pa.nulls(n, pa.int32())
        if "turns" in have and t["num_turns"].null_count:
            n_turns = pc.cast(pc.list_value_length(pf.read(columns=["turns"])["turns"]), pa.int32())
        parts.append(
            pa.table(
                [*cols, pa.array([i] * n, pa.int32()), pa.array(range(n), pa.int64()), n_turns],
                names=[*COLUMNS, FILE, FILE_ROW, "n_turns"],
            )
        )
    return pa.concat_tables(parts, promote_options="permissive")


def _duck_type(column: str) -> str:
    """The DuckDB type of a rollout-schema column (for a typed NULL)."""
    con = duckdb.connect()
    try:
        rel = con.from_arrow(ROLLOUT_SCHEMA.empty_table().select([column]))
        return str(rel.types[0])
    finally:
        con.close()


def fetch_rows(
    files: Sequence[str | os.PathLike[str]],
    keys: pa.Table,
    rows: Sequence[int],
    *,
    batch_rows: int = 10_000,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Full rollout rows (``ROLLOUT_SCHEMA``) of ``keys.take(rows)``, in the order of ``rows``.

    ``keys`` is ``selection_columns``'s table. One DuckDB scan joins the files' rows to the
    wanted (file, row number) pairs, so only the selected rows are materialized; they stream
    back in Arrow batches of ``batch_rows`` that become dicts one batch at a time."""
    if not rows:
        return []
    paths = [str(f) for f in files]
    take = pa.array(rows, pa.int64())
    wanted = pa.table(
        {
            "_path": pa.array(paths, pa.string()).take(keys[FILE].take(take)),
            "_row": keys[FILE_ROW].take(take),
            "_slot": pa.array(range(len(rows)), pa.int64()),
        }
    )
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    objstore.register(con, paths)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.register("wanted", wanted)
    sql = (
        f"SELECT s.* EXCLUDE (filename, file_row_number), w._slot FROM {SCAN} AS s "
        "JOIN wanted AS w ON s.filename = w._path AND s.file_row_number = w._row"
    )
    out: list[dict[str, Any] | None] = [None] * len(rows)
    reader = con.sql(sql, params={"files": paths}).to_arrow_reader(batch_rows)
    for batch in reader:
        part = pa.Table.from_batches([batch])
        slots = part["_slot"].to_pylist()
        for slot, row in zip(slots, _conform(part).to_pylist(), strict=True):
            out[slot] = row
    con.close()
    missing = sum(r is None for r in out)
    if missing:
        raise RuntimeError(f"{missing} selected rollouts were not found in their files")
    return out  # type: ignore[return-value]


def _conform(table: pa.Table) -> pa.Table:
    """A part in ``ROLLOUT_SCHEMA``: columns it predates read as nulls (as the dataset reader)."""
    n = table.num_rows
    cols = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
        for f in ROLLOUT_SCHEMA
    ]
    return pa.table(cols, schema=ROLLOUT_SCHEMA)
