"""The capability counts by their one SQL definition (``sql/capabilities.sql``) run by DuckDB over
an Arrow table: the reference the store's Arrow-compute counts (``capability_count.count_arrow``)
are held to."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddai.pipelines.store.capability_count import count_relation

if TYPE_CHECKING:
    import pyarrow as pa


def count_table(table: pa.Table) -> dict[str, int]:
    """The counts over ``table`` (rollout-log schema)."""
    import duckdb

    con = duckdb.connect()
    try:
        con.register("rollouts_src", table)
        return count_relation(con)
    finally:
        con.close()
