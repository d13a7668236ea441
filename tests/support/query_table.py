"""The query layer's views over an in-memory Arrow table instead of a log store: tests build a
table of rollouts in memory and query it as ``ddai query`` would a store."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from ddai.pipelines.store import query


def connect_table(table: pa.Table) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose ``rollouts_src`` is ``table`` (the rollout schema) and with every
    view of ``query.VIEWS`` over it, as ``query.connect`` makes them over a store."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.register("rollouts_src", table)
    query.annotations_table(con, [])
    for name in query.VIEWS:
        con.execute(query.sql_text(name))
    return con
