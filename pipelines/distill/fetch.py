"""Distill's two reads: the few columns selection ranks on, then the selected rollouts' full rows.

Selection needs nine scalar columns of every rollout, the full rows (turns, response, observation
text) only of the rollouts it keeps; reading the whole run first held every column of every
rollout in memory. ``selection_columns`` scans the run's Parquet files for those columns (DuckDB,
projection pushed into the scan) with each rollout's file and row number; ``fetch_batches`` then
joins the scan to the selected (file, row number) pairs, so DuckDB materializes only those rows
and streams them back in bounded Arrow batches (the columns asked for, in scan order, each row
tagged with its place in the selection): a caller that turns one batch at a time into what it
needs holds a batch of rows, not the selection, and never the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from ddai.pipelines.distill import sqlrows
from ddai.pipelines.distill.select import (
    ROLLOUT_KEY,
    SelectConfig,
    Selection,
    choose,
    prompt_reasons,
    select,
    turn_stats,
)
from ddai.pipelines.records import schema
from ddai.pipelines.records.deps import duckdb, np, pa, pl
from ddai.pipelines.store import objstore, query

# What selection reads (``select.py``), besides the turn count it needs where num_turns is null.
COLUMNS = (*ROLLOUT_KEY, "judge_score", "format_ok", "reward", "ndcg", "num_turns", "flags")
FILE, FILE_ROW = "_file", "_file_row"
# What rebuilding SFT messages reads of a selected rollout (``rebuild.py``, ``run._candidates``):
# the rest (pages, reward parts, flags) would only be turned into Python objects and dropped.
REBUILD_COLUMNS = (*ROLLOUT_KEY, "question", "response", "turns", "extra")
# What the rebuild reads of a turn (not ``forced``, ``retrieved`` or ``value``).
REBUILD_TURN_FIELDS = ("idx", "think", "action", "arg", "sep", "observation", "error")
# DuckDB's cap for the fetch: the join's build side is the selection's locators (three small
# columns), the scan streams, and DuckDB spills rather than grow past this.
FETCH_MEMORY = "1GB"


SCAN = "read_parquet($files, union_by_name = true, filename = true, file_row_number = true)"
_VALID = "t.action IN ('search', 'bbox', 'search_complete')"
_TEXT = "length(coalesce(t.think, '')) + length(coalesce(t.arg, ''))"
# ``select.turn_stats`` in DuckDB, over a rollout's ``turns`` (what rank "ddai" orders by).
STATS_SQL = f"""CAST(len(list_filter(turns, lambda t: t.action = 'search')) AS BIGINT) AS n_search,
    CAST(len(list_filter(turns, lambda t: t.action = 'bbox')) AS BIGINT) AS n_bbox,
    CAST(coalesce(list_sum(list_transform(turns, lambda t: CASE WHEN {_VALID}
        THEN 20 + 2 * length(t.action) + {_TEXT} + length(coalesce(t.sep, ''))
        ELSE {_TEXT} END)), 0) AS BIGINT) AS approx_len"""


def selection_columns(
    files: Sequence[str | os.PathLike[str]], *, threads: int | None = None, stats: bool = False
) -> pa.Table:
    """The selection columns of every rollout in ``files``, in log order (file, then row).

    Adds ``n_turns`` (the parsed turn count, read only when some ``num_turns`` is null), ``_file``
    (index into ``files``) and ``_file_row`` (the row's number in its file); with ``stats``,
    ``select.STATS`` from the turns (rank "ddai")."""
    paths = [str(f) for f in files]
    if not paths:  # a run with no rollouts
        empty = schema.ROLLOUT_SCHEMA.empty_table().select(list(COLUMNS))
        return (
            empty.append_column("n_turns", pa.array([], pa.int32()))
            .append_column(FILE, pa.array([], pa.int32()))
            .append_column(FILE_ROW, pa.array([], pa.int64()))
        )
    if objstore.is_url(paths[0]) and objstore.scan() == "arrow":
        return _remote_selection_columns(paths, stats)
    con = _connect(paths, threads)
    params = {"files": paths}
    have = _types(con, params)
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
    table = table.append_column("n_turns", n_turns)
    if stats and "turns" in have:
        extra = con.sql(f"SELECT {STATS_SQL} FROM {SCAN}", params=params).to_arrow_table()
        for c in extra.column_names:
            table = table.append_column(c, extra[c])
    con.close()
    return table


def scan_select(
    files: Sequence[str | os.PathLike[str]], cfg: SelectConfig, *, threads: int | None = None
) -> tuple[Selection, pa.Table, int]:
    """Distill's selection over ``files``, its ``locate`` table and the number of rollouts read.

    The same selection as ``select(selection_columns(files), cfg)`` (``Selection.rows`` are
    log positions), with the per-rollout work left in DuckDB: one group-by over the scan gives
    every prompt's counts, a second scan brings back only the successes of the prompts the rate
    rule keeps, and ``select.choose`` ranks those. Nothing the size of the run reaches Python.
    Object-storage files read by pyarrow (``objstore.scan() == "arrow"``) take the columnar
    path instead."""
    paths = [str(f) for f in files]
    if not paths or (objstore.is_url(paths[0]) and objstore.scan() == "arrow"):
        keys = selection_columns(paths, threads=threads, stats=cfg.rank == "ddai")
        sel = select(keys, cfg)
        return sel, locate(paths, keys, sel.rows), keys.num_rows
    con = _connect(paths, threads)
    try:
        params: dict[str, Any] = {"files": paths}
        have = _types(con, params)
        # each file's first log position (files in the order given, rows in file order)
        sizes = dict(
            con.execute(f"SELECT filename, count(*) FROM {SCAN} GROUP BY ALL", params).fetchall()
        )
        if set(sizes) - set(paths):  # a name DuckDB spells otherwise would shift every row
            raise RuntimeError(f"the scan named files it was not given: {set(sizes) - set(paths)}")
        starts = np.cumsum([0] + [sizes.get(p, 0) for p in paths])
        con.register(
            "starts", pa.table({"f": pa.array(paths, pa.string()), "o": pa.array(starts[:-1])})
        )
        cols = {c: f"s.{c}" if c in have else f"CAST(NULL AS {_duck_type(c)})" for c in COLUMNS}
        turns = ", s.turns" if "turns" in have else ""
        src = f"""
            SELECT {", ".join(f"{cols[c]} AS {c}" for c in COLUMNS if c != "flags")},
                   {cols["flags"]}[1] AS flag,
                   is_success({cols["judge_score"]}, {cols["format_ok"]}, $threshold) AS success,
                   st.o + s.file_row_number AS _row{turns}
            FROM {SCAN} AS s JOIN starts AS st ON s.filename = st.f"""
        params["threshold"] = float(cfg.success_threshold)
        groups = pl.from_arrow(
            con.sql(
                f"""SELECT run_id, uid, count(*) AS n, count(judge_score) AS n_judged,
                           CAST(sum(success::INTEGER) AS BIGINT) AS n_success,
                           min(_row) AS first_row,
                           count(*) - count(num_turns) AS null_turns
                    FROM ({src}) GROUP BY run_id, uid""",
                params=params,
            ).to_arrow_table()
        )
        n_read = int(groups["n"].sum())
        open_ = prompt_reasons(groups, cfg).filter(pl.col("prompt_reason").is_null())
        con.register("open_prompts", open_.select("run_id", "uid").to_arrow())
        # the turn count, only where the log lacks num_turns (else turns is never read)
        n_actions = "num_turns"
        if int(groups["null_turns"].sum()) and "turns" in have:
            n_actions = "coalesce(num_turns, CAST(len(turns) AS INTEGER))"
        # rank "ddai" orders by the turns' counts and text length (only the successes read them)
        stats = ""
        if cfg.rank == "ddai":
            stats = ", " + (
                STATS_SQL.replace("(turns,", "(r.turns,")
                if "turns" in have
                else "NULL::BIGINT AS n_search, NULL::BIGINT AS n_bbox, NULL::BIGINT AS approx_len"
            )
        successes = pl.from_arrow(
            con.sql(
                f"""SELECT r.run_id, r.uid, r.reward, r.ndcg, {n_actions} AS n_actions,
                           r.rollout_idx, r.step, r.sample_idx, r._row, r.flag{stats}
                    FROM ({src}) AS r
                    SEMI JOIN open_prompts AS o
                        ON r.run_id IS NOT DISTINCT FROM o.run_id
                        AND r.uid IS NOT DISTINCT FROM o.uid
                    WHERE r.success""",
                params=params,
            ).to_arrow_table()
        )
    finally:
        con.close()
    sel = choose(groups.drop("null_turns"), successes, cfg)
    rows = np.asarray(sel.rows, dtype=np.int64)
    file_of = np.searchsorted(starts, rows, side="right") - 1
    wanted = pa.table(
        {
            "_path": pa.array(paths, pa.string()).take(pa.array(file_of)),
            "_row": pa.array(rows - starts[file_of]),
            "_slot": pa.array(np.arange(len(rows), dtype=np.int64)),
        }
    )
    return sel, wanted, n_read


def _connect(paths: list[str], threads: int | None, *settings: str) -> duckdb.DuckDBPyConnection:
    """A connection that reads ``paths`` (object-storage URLs through fsspec), with ``settings``
    (``SET`` statements' bodies) and the one success rule (``is_success``, sql/rollouts.sql)."""
    con = duckdb.connect()
    for s in ("enable_progress_bar = false", *settings):
        con.execute(f"SET {s}")
    con.execute(query.success_macros())
    objstore.register(con, paths)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def _types(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> dict[str, str]:
    """The scan's columns (``SCAN`` over ``$files``) and their DuckDB types."""
    rows = con.execute(f"DESCRIBE SELECT * FROM {SCAN}", params).fetchall()
    return {r[0]: str(r[1]) for r in rows}


def _remote_selection_columns(urls: list[str], stats: bool = False) -> pa.Table:
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
        cols = [
            t[c] if c in have else pa.nulls(n, schema.ROLLOUT_SCHEMA.field(c).type) for c in COLUMNS
        ]
        n_turns: pa.Array | pa.ChunkedArray = pa.nulls(n, pa.int32())
        if "turns" in have and t["num_turns"].null_count:
            n_turns = pc.cast(pc.list_value_length(pf.read(columns=["turns"])["turns"]), pa.int32())
        part = pa.table(
            [*cols, pa.array([i] * n, pa.int32()), pa.array(range(n), pa.int64()), n_turns],
            names=[*COLUMNS, FILE, FILE_ROW, "n_turns"],
        )
        if stats and "turns" in have:
            turns = pl.from_arrow(pf.read(columns=["turns"])["turns"])
            for c, col in turn_stats(turns).to_arrow().to_pydict().items():
                part = part.append_column(c, pa.array(col, pa.int64()))
        parts.append(part)
    return pa.concat_tables(parts, promote_options="permissive")


def _duck_type(column: str) -> str:
    """The DuckDB type of a rollout-schema column (for a typed NULL)."""
    con = duckdb.connect()
    try:
        rel = con.from_arrow(schema.ROLLOUT_SCHEMA.empty_table().select([column]))
        return str(rel.types[0])
    finally:
        con.close()


def locate(
    files: Sequence[str | os.PathLike[str]], keys: pa.Table, rows: Sequence[int]
) -> pa.Table:
    """Where ``keys.take(rows)`` lie: ``_path``, ``_row`` (row number in that file) and
    ``_slot`` (position in ``rows``), one row per selected rollout.

    Small (three columns of the selection), so the caller may drop ``keys`` (every rollout of
    the run) before fetching."""
    paths = [str(f) for f in files]
    take = pa.array(rows, pa.int64())
    return pa.table(
        {
            "_path": pa.array(paths, pa.string()).take(keys[FILE].take(take)),
            "_row": keys[FILE_ROW].take(take),
            "_slot": pa.array(range(len(rows)), pa.int64()),
        }
    )


def fetch_batches(
    files: Sequence[str | os.PathLike[str]],
    wanted: pa.Table,
    *,
    columns: Sequence[str] | None = None,
    turn_fields: Sequence[str] | None = None,
    batch_rows: int = 10_000,
    threads: int | None = None,
    memory_limit: str | None = FETCH_MEMORY,
    sql_rows: sqlrows.Build | None = None,
) -> Iterator[pa.Table]:
    """The rows ``wanted`` (``locate``'s table) locates, as Arrow tables of at most
    ``batch_rows`` rows in ``ROLLOUT_SCHEMA`` (only ``columns`` when given, and of each turn
    only ``turn_fields`` when given: zero-copy, so Python rows made of a batch skip the rest)
    plus ``_slot``.

    Batches come in scan order, not ``_slot`` order: one DuckDB scan hash-joins the files' rows
    to the wanted (file, row number) pairs and streams the matches back without ordering them
    (``preserve_insertion_order = false``), so neither DuckDB nor the caller ever holds the
    whole selection; the caller places each row by its ``_slot``. Raises when some wanted row
    is not in its file.

    ``sql_rows``: the rows DuckDB can rebuild come built, with their big
    columns null (``sqlrows.ADDED`` columns after ``_slot``; none when the files lack a column
    the SQL reads)."""
    if not wanted.num_rows:
        return
    paths = [str(f) for f in files]
    names = [f.name for f in schema.ROLLOUT_SCHEMA if columns is None or f.name in columns]
    limit = [f"memory_limit = '{memory_limit}'"] if memory_limit else []
    con = _connect(paths, threads, "preserve_insertion_order = false", *limit)
    try:
        con.register("wanted", wanted)
        params = {"files": paths}
        have = _types(con, params)
        cols = ", ".join(f"s.{c}" for c in names if c in have)
        sql = (
            f"SELECT {cols}, w._slot FROM {SCAN} AS s "
            "JOIN wanted AS w ON s.filename = w._path AND s.file_row_number = w._row"
        )
        added: tuple[str, ...] = ()
        if sql_rows is not None and _sql_readable(have, names):
            sql, more = sqlrows.query(sql, sql_rows)
            params = {**params, **more}
            added = sqlrows.ADDED
        seen = 0
        for batch in con.sql(sql, params=params).to_arrow_reader(batch_rows):
            part = pa.Table.from_batches([batch])
            seen += part.num_rows
            base = _conform(part, names).append_column("_slot", part["_slot"])
            for c in added:
                base = base.append_column(c, part[c])
            part = base
            if turn_fields is not None and "turns" in part.column_names:
                i = part.schema.get_field_index("turns")
                part = part.set_column(i, "turns", _turn_fields(part["turns"], turn_fields))
            yield part
    finally:
        con.close()
    if seen != wanted.num_rows:
        raise RuntimeError(
            f"{wanted.num_rows - seen} selected rollouts were not found in their files"
        )


def _sql_readable(types: dict[str, str], names: list[str]) -> bool:
    """Whether every column and turn field ``sqlrows`` reads is in the files (``types``: the
    scan's) and fetched (``names``)."""
    if not set(sqlrows.COLUMNS) <= set(names):
        return False
    if not set(sqlrows.COLUMNS) <= set(types):
        return False
    turn = types["turns"].replace('"', "")  # DuckDB quotes keywords (action)
    if not turn.startswith("STRUCT(") or not turn.endswith(")[]"):
        return False
    fields = dict(f.strip().split(" ", 1) for f in turn[len("STRUCT(") : -3].split(","))
    return all(fields.get(f) == "VARCHAR" for f in sqlrows.TURN_FIELDS)


def _turn_fields(turns: pa.ChunkedArray, keep: Sequence[str]) -> pa.ChunkedArray:
    """``turns`` (list of turn structs) with only the ``keep`` fields of each turn, sharing the
    buffers (offsets, validity and the kept children are reused, nothing is copied)."""
    out = []
    for chunk in turns.chunks:
        structs = chunk.values
        fields = [f for f in structs.type if f.name in keep]
        kept = pa.StructArray.from_arrays(
            [structs.field(f.name) for f in fields],
            fields=fields,
            mask=structs.is_null() if structs.null_count else None,
        )
        mask = chunk.is_null() if chunk.null_count else None
        out.append(pa.ListArray.from_arrays(chunk.offsets, kept, mask=mask))
    return pa.chunked_array(out, pa.list_(pa.struct(fields))) if out else turns


def _conform(table: pa.Table, names: Sequence[str] | None = None) -> pa.Table:
    """A part in ``ROLLOUT_SCHEMA`` (its ``names`` columns, all by default): columns it
    predates read as nulls (as the dataset reader)."""
    n = table.num_rows
    fields = [f for f in schema.ROLLOUT_SCHEMA if names is None or f.name in names]
    cols = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
        for f in fields
    ]
    return pa.table(cols, schema=pa.schema(fields, metadata=schema.ROLLOUT_SCHEMA.metadata))
