"""A query's result, shown or written by DuckDB alone (no pyarrow: ``ddai query`` starts faster).

``ddai query`` runs one SQL statement over the log views and prints or saves what it returns:

- ``write_parquet``: DuckDB's own Parquet writer (zstd), atomically; a ``HUGEINT`` (DuckDB's type of
  ``sum()`` over integers) is stored as ``DECIMAL(38,0)``, as the Arrow writer stored it, not as
  the double DuckDB's writer would make of it;
- ``materialize`` keeps the result in the connection once (the query runs once), then
  ``preview`` fetches its first rows for a table and ``write_csv`` / ``write_json_lines``
  stream it in batches. Cells are DuckDB's Python values: a ``MAP`` is a dict
  (``{"judge": 0.5}``), ``sum()`` of integers an int.

Log text is untrusted: a CSV cell a spreadsheet would run as a formula is escaped
(``csv_cells.escape``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import io

RESULT = "ddai_query_result"


class Format(StrEnum):
    """Where and how ``ddai query`` shows its result (a flag's choices)."""

    TABLE = "table"
    CSV = "csv"
    PARQUET = "parquet"
    JSON = "json"


@dataclass(frozen=True)
class QueryConfig:
    """One ``ddai query``: the statement, its parameters and where its result goes."""

    sql: str
    """SQL over the views rollouts, turns, prompts, prompts_at(threshold), runs, discrepancies,
    failure_attribution (failure_attribution_at(score_max, agree_min, threshold)),
    reward_latency, zero_variance_groups, drop_keep, annotations."""
    params: list[str] = field(default_factory=list)
    """Bound parameter, used as $NAME in the SQL (bound, never pasted into the text). NAME=VALUE
    binds a string (`-p u=528` is the string '528'); NAME:TYPE=VALUE binds a typed value, TYPE
    one of int, float, bool (true/false/1/0/yes/no), str: `-p n:int=5 -p t:float=0.8 -p
    ok:bool=true`. Repeatable."""
    fmt: Format = Format.TABLE
    """Output format."""
    out: Path | None = None
    """Write the result to this file."""
    limit: int = 50
    """Rows shown by --format table (and listed by --json)."""
    as_json: bool = False
    """Print one JSON summary instead of the table: rows, columns, the first --limit rows as
    lists (data) and the --out file."""


BATCH_ROWS = 10_000


@dataclass(frozen=True)
class Result:
    """A materialized result: its table in the connection, column names and row count."""

    table: str | None  # None: the statement returned nothing (DDL)
    columns: list[str]
    num_rows: int


def materialize(con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation | None) -> Result:
    """Run ``rel`` once into a table of ``con`` (None: a statement without a result)."""
    if rel is None:
        return Result(None, [], 0)
    con.execute(f"DROP TABLE IF EXISTS {RESULT}")  # a second result on the same connection
    rel.to_table(RESULT)
    out = con.table(RESULT)
    (n,) = con.execute(f"SELECT count(*) FROM {RESULT}").fetchall()[0]
    return Result(RESULT, list(out.columns), int(n))


def rows(
    con: duckdb.DuckDBPyConnection, result: Result, limit: int | None = None
) -> Iterator[tuple]:
    """The result's rows in order, fetched ``BATCH_ROWS`` at a time."""
    if result.table is None:
        return
    cur = con.execute(f"FROM {result.table}" + ("" if limit is None else f" LIMIT {int(limit)}"))
    while batch := cur.fetchmany(BATCH_ROWS):
        yield from batch


def preview(con: duckdb.DuckDBPyConnection, result: Result, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows as dicts (column → value)."""
    return [dict(zip(result.columns, r, strict=True)) for r in rows(con, result, limit)]


def write_csv(con: duckdb.DuckDBPyConnection, result: Result, fh: IO[str]) -> None:
    """The result as CSV with a header; nulls as empty cells, formula-like texts escaped."""
    csv_cells.write_rows(fh, result.columns, rows(con, result))


def write_json_lines(con: duckdb.DuckDBPyConnection, result: Result, fh: IO[str]) -> None:
    """The result as one JSON object per line (values JSON has no type for as strings)."""
    for r in rows(con, result):
        obj = dict(zip(result.columns, r, strict=True))
        fh.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _exact_integers(rel: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``rel`` with its ``HUGEINT`` columns as ``DECIMAL(38,0)`` (exact in Parquet)."""
    types = [str(t) for t in rel.types]
    if "HUGEINT" not in types or len(set(rel.columns)) < len(rel.columns):
        return rel
    return rel.project(
        ", ".join(
            f"CAST({_quoted(c)} AS DECIMAL(38,0)) AS {_quoted(c)}" if t == "HUGEINT" else _quoted(c)
            for c, t in zip(rel.columns, types, strict=True)
        )
    )


def write_parquet(
    con: duckdb.DuckDBPyConnection,
    rel: duckdb.DuckDBPyRelation | None,
    out: str | os.PathLike[str],
) -> int:
    """Write ``rel`` to the Parquet file ``out`` (zstd, atomically: a temp file renamed, or one
    object put); returns the rows written."""
    if rel is None:
        raise ValueError("the SQL returned no result to write (a statement such as CREATE)")
    with io.atomic_path(out) as tmp:
        _exact_integers(rel).to_parquet(str(tmp), compression="zstd")
        (n,) = con.execute("SELECT count(*) FROM read_parquet(?)", [str(tmp)]).fetchall()[0]
    return int(n)
