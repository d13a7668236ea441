"""The capability counts by their one SQL definition (``sql/capabilities.sql``) run by DuckDB over
an Arrow table: the reference the store's Arrow-compute counts (``capability_count.count_arrow``)
are held to.

One in-memory database per process, a cursor per count, so that threads count at once and a
forked child never touches its parent's connection.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from ddai.pipelines.store.capability_count import count_relation

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

_DB: dict[int, duckdb.DuckDBPyConnection] = {}
"""One in-memory database per process (pid → connection): opening one costs ~25 ms."""
_DB_LOCK = threading.Lock()
_INHERITED: list[duckdb.DuckDBPyConnection] = []
"""A parent's connections as a forked child sees them: kept referenced and never used or closed
(closing one in the child runs DuckDB's teardown on state the child does not own: a segfault)."""


def _after_fork_in_child() -> None:
    global _DB_LOCK
    _INHERITED.extend(_DB.values())
    _DB.clear()
    _DB_LOCK = threading.Lock()  # the parent's may have been held by another thread at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _cursor() -> duckdb.DuckDBPyConnection:
    """A connection of its own to the process's database: threads may count at once, and a
    table registered on it (a temporary view) is seen by no other cursor."""
    import duckdb

    pid = os.getpid()  # a forked child opens its own: a parent's connection is not fork-safe
    with _DB_LOCK:
        if pid not in _DB:
            _INHERITED.extend(_DB.values())
            _DB.clear()
            _DB[pid] = duckdb.connect()
            _DB[pid].execute("SET enable_progress_bar = false")
        return _DB[pid].cursor()


def count_table(table: pa.Table) -> dict[str, int]:
    """The counts over ``table`` (rollout-log schema)."""
    con = _cursor()
    try:
        con.register("rollouts_src", table)
        return count_relation(con)
    finally:
        con.close()
