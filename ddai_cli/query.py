"""CLI: ``ddai query`` (SQL over the log views).

It starts without pyarrow, pandas or polars: DuckDB reads the store and writes the result
(``ddai.pipelines.store.query_out``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import (
    LogsOpt,
    RunsOpt,
    console,
    err_console,
    fail,
    print_rows,
    summary,
)
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import io, objstore, query, query_out, workspace
from ddai.pipelines.store.query_out import QueryConfig

QUERY_FLAGS = config_flags(
    QueryConfig,
    {
        "sql": {"argument": True, "metavar": "SQL"},
        "fmt": "--format",
        "limit": None,
        "as_json": "--json",
    },
)
PARAM_OUT_FLAGS = config_flags(
    QueryConfig,
    {
        "params": {
            "decl": ("--param", "-p"),
            "metavar": "<name[:type]=value>",
            "type": list[str] | None,
            "default": None,
            "parse": lambda texts: texts or [],
        },
        "out": {"decl": ("--out", "-o"), "metavar": "<file>"},
    },
)


@with_groups({"settings": QUERY_FLAGS, "param_out": PARAM_OUT_FLAGS})
def query_cmd(
    *,
    settings: dict[str, Any],
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    param_out: dict[str, Any],
) -> None:
    """Run SQL over the rollout-log views and print or save the result."""
    cfg = QueryConfig(**settings, **param_out)
    sql, fmt, limit, as_json, out = cfg.sql, cfg.fmt, cfg.limit, cfg.as_json, cfg.out
    try:
        params = dict(parse_param(p) for p in cfg.params)
    except ValueError as e:
        raise fail(str(e)) from e
    if fmt == "parquet" and out is None:
        raise fail("--format parquet needs --out FILE")
    if out is not None and not objstore.is_url(out) and Path(out).is_dir():
        ext = {"json": "jsonl", "parquet": "parquet"}.get(fmt, "csv")
        raise fail(
            f"--out {out} is a folder: name a file in it (e.g. {Path(out) / f'result.{ext}'})"
        )
    if as_json and fmt != "table" and out is None:
        raise fail(
            f"--json and --format {fmt} both print to stdout: drop --json, or write the "
            f"{fmt} with --out FILE"
        )
    try:
        # only the views the SQL names: binding all of them costs more than a small query
        root = query.logs_or_fail(workspace.logs_dir(logs, demo_fallback=True))
        con = query.connect(root, runs, views=query.views_for(sql))
        rel = query.relation(con, sql, params or None)
        if fmt == "parquet" and out is not None:  # (without --out: refused above)
            n = query_out.write_parquet(con, rel, out)
        else:
            result = query_out.materialize(con, rel)
            n = result.num_rows
            if out is not None or fmt != "table":
                _write(con, result, fmt, out)
    except (FileNotFoundError, ValueError, duckdb.Error) as e:
        raise fail(str(e)) from e
    # also with rows: `count(*)` over an empty store is one row of 0, which hides a wrong --logs
    empty = _empty_store(root, runs)
    if as_json:
        # values as lists under the column names: no JSON key is built from the data
        shown = [] if out is not None else query_out.rows(con, result, limit)
        data = {"rows": n, "columns": list(rel.columns) if rel is not None else []}
        shown_out = objstore.display(out) if out is not None else None  # a URL as given
        data |= {"data": [[_json_value(v) for v in r] for r in shown], "out": shown_out}
        summary("query", {**data, "format": fmt, "note": empty}, as_json=True)
        return
    if out is not None:
        where = objstore.display(out)
        console.print(f"wrote {n:,} rows to {where}", style="dim", markup=False, soft_wrap=True)
    elif fmt == "table":
        _show(con, result, limit, empty)
    if empty and (out is not None or fmt != "table" or n > 0):
        err_console.print(f"note: {empty}", markup=False, soft_wrap=True)


def _json_value(v: object) -> object:
    """A cell as JSON has it: numbers, strings, lists and maps as they are, others as text."""
    import json

    return json.loads(json.dumps(v, default=str))


def _empty_store(root: Path, runs: list[str] | None) -> str | None:
    """The note when the store itself is empty (no run, or runs of no rows): with no result row
    "matched nothing" would blame the query, with some (a count of 0) the 0 would pass as data."""
    from ddai.pipelines.store import store_read

    listed = runs or store_read.list_runs(root)
    if any((store_read.run_manifest(root, r) or {}).get("rollouts_total", 1) for r in listed):
        return None
    what = f"run {', '.join(runs)} of " if runs else ""
    return (
        f"the {what}log store {root} holds no rollouts: ingest logs first "
        f"(`ddai ingest FILE --logs {root}`)"
    )


def _write(
    con: duckdb.DuckDBPyConnection, result: query_out.Result, fmt: str, out: Path | None
) -> None:
    """CSV (also ``--format table`` with ``--out``) or JSON lines, to ``out`` or stdout."""
    write = query_out.write_json_lines if fmt == "json" else query_out.write_csv
    if out is None:
        write(con, result, sys.stdout)
        return
    with io.atomic_open(out, "w", encoding="utf-8") as fh:
        write(con, result, fh)


def _show(
    con: duckdb.DuckDBPyConnection, result: query_out.Result, limit: int, empty: str | None = None
) -> None:
    """The first ``limit`` rows as a table for people; ``empty``: why the store has none."""
    if result.num_rows == 0:
        # An empty table prints only its header, which reads like a display fault.
        why = empty or "the query matched nothing"
        console.print(f"no rows: {why} (columns: {', '.join(result.columns)})", markup=False)
        return
    print_rows(f"{result.num_rows:,} rows", query_out.preview(con, result, limit))
    if result.num_rows > limit:
        console.print(f"[dim]{result.num_rows:,} rows, {limit} shown (--limit)[/]")


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _bool(value: str) -> bool:
    try:
        return _BOOLS[value.strip().lower()]
    except KeyError:
        raise ValueError(f"not a boolean: {value!r}") from None


_TYPES = {"str": str, "int": int, "float": float, "bool": _bool}


def parse_param(text: str) -> tuple[str, str | int | float | bool]:
    """``NAME=VALUE`` → (NAME, the string VALUE); ``NAME:TYPE=VALUE`` → (NAME, VALUE as TYPE).

    A value is never guessed from its look: ``u=528`` stays the string ``'528'`` (a numeric uid
    must match as a string, and ``1e3`` must not equal ``1_000``). Raises ValueError naming the
    fix.
    """
    head, sep, value = text.partition("=")
    name, colon, type_name = head.partition(":")
    if not sep or not name.isidentifier():
        raise ValueError(
            f"--param {text!r} must look like NAME=VALUE or NAME:TYPE=VALUE (TYPE: int, float, "
            "bool, str)"
        )
    if not colon:
        return name, value
    cast = _TYPES.get(type_name)
    if cast is None:
        raise ValueError(
            f"--param {text!r}: unknown type {type_name!r}; use one of {', '.join(_TYPES)}"
        )
    try:
        out = cast(value)
    except ValueError:
        raise ValueError(f"--param {text!r}: {value!r} is not a {type_name}") from None
    if isinstance(out, float) and out != out:  # NaN compares equal to nothing: refuse it
        raise ValueError(f"--param {text!r}: NaN matches nothing; pass a number")
    return name, out


register = top_command("query", query_cmd)
