"""The DuckDB query layer: views from ``ddai.sql`` over the log store, SQL loaded by name.

The store's Parquet files are read by DuckDB as the relation ``rollouts_src``; the views in ``sql/*.sql`` are created over it in dependency order. Queries take
bound parameters (``$name`` or ``?``), never string interpolation.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ddai.pipelines import store

# Creation order matters: later views read earlier ones.
VIEWS = (
    "macros",
    "rollouts",
    "turns",
    "prompts_at",
    "prompts",
    "runs",
    "discrepancies",
    # DDAI's round analyses (issue 13): why low prompts fail, reward latency, zero variance.
    "failure_attribution",
    "reward_latency",
    "zero_variance",
)


def sql_text(name: str) -> str:
    """The text of ``sql/<name>.sql`` (package data ``ddai.sql``)."""
    try:
        return resources.files("ddai.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")
    except FileNotFoundError as e:
        known = sorted(
            p.name[:-4] for p in resources.files("ddai.sql").iterdir() if p.name.endswith(".sql")
        )
        raise ValueError(f"no SQL file {name!r}; known: {', '.join(known)}") from e


def connect(
    logs: str | os.PathLike[str],
    runs: list[str] | None = None,
    *,
    database: str = ":memory:",
    threads: int | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the rollout-log views over ``logs`` (or the named runs).

    The views read one snapshot of each run (the files its manifest listed when connecting),
    held while the connection lives, so a concurrent re-ingest or append never changes or
    removes what the connection's queries read."""
    snap = store.snapshot(logs, runs)
    try:
        con = duckdb.connect(database)
    except BaseException:
        snap.release()
        raise
    snap.keep_while(con)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    files = snap.all_files()
    if files:
        # DuckDB's own Parquet reader (about 2x faster than scanning an Arrow dataset); the file
        # list is passed as a value, never pasted into SQL text.
        # union_by_name: partitions written before a column existed (``flags``, schema 1) read
        # it as null.
        con.read_parquet(
            [str(f) for f in files], hive_partitioning=False, union_by_name=True
        ).create_view("rollouts_src")
    else:
        # An empty store still answers queries (with no rows).
        con.register("rollouts_src", store.ROLLOUT_SCHEMA.empty_table())
    for name in VIEWS:
        con.execute(sql_text(name))
    return con


def connect_table(table: pa.Table) -> duckdb.DuckDBPyConnection:
    """The same views over an in-memory table in the rollout schema (tests, trainer output)."""
    con = duckdb.connect()
    con.register("rollouts_src", table)
    for name in VIEWS:
        con.execute(sql_text(name))
    return con


def run_named(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | list[Any] | None = None
) -> pa.Table:
    """Run the query in ``sql/<name>.sql`` with bound parameters; returns an Arrow table."""
    return run_sql(con, sql_text(name), params)


def run_sql(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | list[Any] | None = None
) -> pa.Table:
    rel = con.sql(sql, params=params or None)
    if rel is None:  # a statement without a result (DDL)
        return pa.table({})
    return rel.to_arrow_table()


def logs_or_fail(logs: Path) -> Path:
    if not logs.exists():
        raise FileNotFoundError(
            f"log store {logs} does not exist; ingest logs first (`ddai ingest FILE --logs {logs}`) "
            "or pass --logs"
        )
    return logs
