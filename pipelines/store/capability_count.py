"""Counting what rollouts carry (turns, pages, judge, NDCG, reward, step, advantages, images).

One definition, ``sql/capabilities.sql``, run by DuckDB (``count_relation``):
``ddai.pipelines.store.capabilities`` runs it over a partition whose manifest predates the counts.
The store counts every batch it writes (so a partition's manifest says what its rollouts carry)
with ``count_arrow``, the same counts in Arrow compute: a training step's batch of a few rows
costs ~14 ms through DuckDB and well under 1 ms this way; a test holds it to the SQL on the same
rows (``tests/oracles/capability_sql.py``). This module imports nothing of the store, so the
store can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a table or connection is handed in
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


def count_arrow(table: pa.Table) -> dict[str, int]:
    """The SQL's counts over ``table`` (rollout-log schema), in Arrow compute: ``turns``
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
