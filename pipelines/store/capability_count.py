"""Counting what rollouts carry (turns, pages, judge, NDCG, reward, step, advantages, images).

One definition, ``sql/capabilities.sql``, run by DuckDB over an Arrow table
(``count_table``): ``ddai.pipelines.store.capabilities`` runs it over a partition whose manifest
predates the counts. The store counts every batch it writes (so a partition's manifest says what
its rollouts carry) with ``count_arrow``, the same counts in Arrow compute: a training step's
batch of a few rows costs ~14 ms through DuckDB and well under 1 ms this way; a test holds it to
the SQL on the same rows. This module imports nothing of the store, so the store can use it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a table or connection is handed in: DuckDB is imported to count a table
    import duckdb
    import pyarrow as pa

NAMES = ("turns", "pages", "judge", "ndcg", "reward", "step", "advantages", "images")
"""The capabilities, in display order; each is a count of rollouts."""


def sql() -> str:
    from importlib import resources  # ~5 ms of imports: not on ``ddai runs``'s path

    return resources.files("ddai.sql").joinpath("capabilities.sql").read_text(encoding="utf-8")


def count_relation(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The counts over ``rollouts_src`` on ``con``: ``rollouts`` and one per name in ``NAMES``."""
    rel = con.sql(sql())
    return {c: int(v or 0) for c, v in zip(rel.columns, rel.fetchall()[0], strict=True)}


_DB: dict[int, duckdb.DuckDBPyConnection] = {}
"""One in-memory database per process (pid → connection): opening one costs ~25 ms, more than
counting a training step's rows, and every commit of a run counts its batches."""
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
            _DB[pid].execute("SET enable_progress_bar = false")  # no bar over the command's
        return _DB[pid].cursor()


def count_table(table: pa.Table) -> dict[str, int]:
    """The counts over ``table`` (rollout-log schema)."""
    con = _cursor()
    try:
        con.register("rollouts_src", table)
        return count_relation(con)
    finally:
        con.close()


def count_arrow(table: pa.Table) -> dict[str, int]:
    """``count_table``'s counts over ``table`` (rollout-log schema), in Arrow compute: ``turns``
    a non-empty list (a null one is not), ``images`` a turn whose ``retrieved`` is non-empty,
    the other fields their non-nulls."""
    import pyarrow.compute as pc

    # No Python scalar reaches pyarrow here (``x > 0`` is ``sign(x)``, a null mask entry drops its
    # row): converting one imports pandas when it is installed, 0.3 s of an ingest's start.
    turns = table.column("turns").combine_chunks()
    out = {"rollouts": table.num_rows}
    out["turns"] = int(pc.sum(pc.sign(pc.list_value_length(turns))).as_py() or 0)
    out["pages"] = table.num_rows - table.column("retrieved_pages").null_count
    for name, col in (
        ("judge", "judge_score"),
        ("ndcg", "ndcg"),
        ("reward", "reward"),
        ("step", "step"),
        ("advantages", "advantage"),
    ):
        out[name] = table.num_rows - table.column(col).null_count
    # A turn with a non-empty ``retrieved`` (a null turn or list counts as none), per rollout.
    shown = pc.sign(pc.list_value_length(pc.struct_field(pc.list_flatten(turns), "retrieved")))
    parents = pc.filter(pc.list_parent_indices(turns), shown.cast("bool"))
    out["images"] = len(pc.unique(parents))
    return {k: out[k] for k in ("rollouts", *NAMES)}


def empty() -> dict[str, int]:
    return {"rollouts": 0, **dict.fromkeys(NAMES, 0)}


def add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Counts of two sets of rollouts together (appends, batches)."""
    return {k: int(a.get(k, 0)) + int(b.get(k, 0)) for k in ("rollouts", *NAMES)}
