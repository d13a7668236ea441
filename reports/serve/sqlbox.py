"""The read-only SQL box: one SELECT over the explorer's views, no writes, no files outside the store.

Two locks: ``lock_down`` turns DuckDB's external access off (only the store's folder stays
readable, which the views need) and locks the configuration so no statement turns it back on;
``check_select`` accepts exactly one SELECT statement, so DDL, ``COPY``, ``ATTACH``, ``SET``,
``INSTALL`` / ``LOAD`` and ``PRAGMA`` never reach the engine.

DuckDB keeps its temp folder readable whatever the allow-list says, and its default is ``.tmp``
under the working directory, where anything may lie: ``spill_to`` points it at a private folder
made for this database before anything spills, and ``lock_down`` turns spilling off on a
database still on the default, so the SQL box reads no folder but the store and its own spill.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

from ddai.pipelines.records.deps import duckdb, pa
from ddai.pipelines.store import objstore


class SqlRejected(ValueError):
    """A statement the SQL box does not run; the message says why and what it accepts."""


def spill_to(con: duckdb.DuckDBPyConnection, folder: Path, store: Path) -> None:
    """Spill ``con``'s database into ``folder`` (a fresh private folder holding nothing else);
    before its first query that spills. Raises ValueError if ``folder`` and ``store`` overlap
    (a store on object storage never does)."""
    folder = Path(folder).resolve()
    local = None if objstore.is_url(store) else Path(store).resolve()
    if local is not None and (folder.is_relative_to(local) or local.is_relative_to(folder)):
        raise ValueError(
            f"DuckDB's temp folder {folder} overlaps the store {local}: set TMPDIR to a folder "
            "outside the store"
        )
    con.execute("SET temp_directory = $dir", {"dir": str(folder)})


def lock_down(
    con: duckdb.DuckDBPyConnection, store: Path, *, memory_limit: int | None = None
) -> None:
    """From now on ``con`` reads files under ``store`` only and writes none; not reversible.

    ``memory_limit``: bytes the database's queries may hold (every cursor's together); None
    keeps DuckDB's default (80% of the machine). A database whose temp folder is still DuckDB's
    default (``.tmp``, relative to the working directory) stops spilling: that folder would
    stay readable."""
    if memory_limit is not None:
        con.execute("SET memory_limit = $m", {"m": f"{int(memory_limit)}B"})
    temp = con.sql("SELECT current_setting('temp_directory')").fetchall()[0][0]
    if temp and not Path(temp).is_absolute():
        con.execute("SET temp_directory = ''")
    # a store on object storage stays its URL (DuckDB matches the prefix), read through the
    # filesystem ``objstore.register`` gave the database
    url = objstore.url_of(store)
    allowed = url.rstrip("/") + "/" if url else str(Path(store).resolve())
    con.execute("SET allowed_directories = $dirs", {"dirs": [allowed]})
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def check_select(sql: str) -> None:
    """Raise SqlRejected unless ``sql`` is exactly one SELECT (``WITH …``/``FROM …`` included)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise SqlRejected(f"SQL does not parse: {e}") from None
    if len(statements) != 1:
        raise SqlRejected(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise SqlRejected(f"only SELECT runs here (got {kind.name}); the SQL box is read-only")


# Rows an export of a SQL box result holds at most (the page shows ``sql_max_rows``).
EXPORT_MAX_ROWS = 1_000_000


def select_table(
    con: duckdb.DuckDBPyConnection, sql: str, *, max_rows: int, timeout_s: float = 30.0
) -> tuple[pa.Table, bool]:
    """Run one checked SELECT: its first ``max_rows`` rows as an Arrow table and whether there
    were more.

    Raises SqlRejected for a statement that is not one SELECT, an engine error (a file read
    outside the store included) or a query running past ``timeout_s`` (interrupted).
    """
    check_select(sql)
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        rel = con.sql(sql)
        if rel is None:  # pragma: no cover - a SELECT always has a result
            raise SqlRejected("the statement returned no result")
        table = rel.limit(max_rows + 1).to_arrow_table()
    except duckdb.InterruptException:
        raise SqlRejected(f"the query ran longer than {timeout_s:g} s and was stopped") from None
    except duckdb.Error as e:
        raise SqlRejected(str(e)) from None
    finally:
        timer.cancel()
    return table.slice(0, max_rows), table.num_rows > max_rows


def _json_cell(v: Any) -> Any:
    """``v`` with every non-finite float (also inside a list or struct) as its CSV text."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, list):
        return [_json_cell(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_cell(x) for k, x in v.items()}
    return v


def relations(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The views and tables a SELECT in the box can read, by name: what the page lists, so the
    list is the build's own (a hand-written one left out the analyses' and labels' views)."""
    rows = con.sql(
        "SELECT DISTINCT table_name FROM information_schema.tables ORDER BY table_name"
    ).fetchall()
    return [r[0] for r in rows]


def run_select(
    con: duckdb.DuckDBPyConnection, sql: str, *, max_rows: int, timeout_s: float = 30.0
) -> dict[str, Any]:
    """``select_table`` as ``{"columns", "rows" (lists), "truncated"}`` for the page; a NaN or
    infinity (``ln(0)``, ``0.0 / 0.0``), which JSON cannot carry, as the CSV export spells it."""
    table, truncated = select_table(con, sql, max_rows=max_rows, timeout_s=timeout_s)
    rows = [[_json_cell(v) for v in r.values()] for r in table.to_pylist()]
    return {"columns": table.column_names, "rows": rows, "truncated": truncated}


def csv_text(table: pa.Table) -> str:
    """``table`` as CSV through the one formula-cell escape (``csv_cells``); a list or struct
    cell is written as its JSON text."""
    from ddai.pipelines.records import csv_cells

    def cell(v: Any) -> Any:
        return json.dumps(v, default=str, ensure_ascii=False) if isinstance(v, list | dict) else v

    columns = [c.to_pylist() for c in table.columns]
    rows = ([cell(v) for v in row] for row in zip(*columns, strict=True))
    return csv_cells.rows_text(table.column_names, rows)
