"""The DuckDB query layer: views from ``ddai.sql`` over the log store, SQL loaded by name.

The store's Parquet files are read by DuckDB as the relation ``rollouts_src``; the views in ``sql/*.sql`` are created over it in dependency order. Queries take
bound parameters (``$name`` or ``?``), never string interpolation.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from ddai.pipelines.records.deps import duckdb

# The read side only: ``ddai query`` and ``ddai runs`` start without pyarrow (~0.3 s); the store
# module (its Arrow schema) is imported where an Arrow table or dataset is built.
from ddai.pipelines.store import objstore, store_read
from ddai.pipelines.store.store_read import logs_or_fail  # noqa: F401 (its home before store_read)

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa


SCAN_ENV = objstore.SCAN_ENV  # how a store on object storage is scanned (``objstore.scan``)

# Creation order matters: later views read earlier ones.
VIEWS = (
    "macros",
    "rollouts",
    # each rollout's facts from its turns, or kept per part (``pipelines/store/turn_facts.py``)
    "turn_facts",
    "turns",
    "valued_turns",
    "prompts_at",
    "prompts",
    "runs",
    "discrepancies",
    # DDAI's round analyses (issue 13): why low prompts fail, reward latency, zero variance.
    "failure_attribution",
    "reward_latency",
    "zero_variance",
    # labels people put on prompts, rollouts and turns (`ddai serve --annotate`; issue 32)
    "annotations",
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


_SUCCESS_MACROS = re.compile(
    r"CREATE OR REPLACE MACRO (?:success_threshold|is_success)\(.*?;", re.S
)


def success_macros() -> str:
    """The success rule's macros (``success_threshold()``, ``is_success``) as rollouts.sql defines
    them: for a connection that scans Parquet without the views (distill's selection)."""
    found = _SUCCESS_MACROS.findall(sql_text("rollouts"))
    if len(found) != 2:
        raise RuntimeError(f"rollouts.sql should define 2 success macros, found {len(found)}")
    return "\n".join(found)


_CREATES = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?(?:VIEW|MACRO|TABLE)\s+(\w+)", re.I
)
_WORDS = re.compile(r"\w+")
# Comments dropped, string literals and quoted names kept (a `--` inside a string is no comment).
_COMMENTS = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|--[^\n]*|/\*.*?\*/", re.S)
# A view file's CREATE made connection-local: on a shared database (``connect(shared=True)``)
# each connection's views read its own snapshot, and a fresh database holds them the same way.
_TEMP = re.compile(r"\bCREATE\s+OR\s+REPLACE\s+(VIEW|MACRO)\b", re.I)
# A file's own TEMP, dropped when every connection of the database must see what it creates.
_OWN_TEMP = re.compile(r"\b(CREATE\s+(?:OR\s+REPLACE\s+)?)TEMP(?:ORARY)?\s+", re.I)


def database_wide(sql: str) -> str:
    """``sql`` with its ``CREATE TEMP`` made plain ``CREATE``: for a database of its own whose
    cursors must all see the tables it builds (``connect(wide=True)``)."""
    return _OWN_TEMP.sub(r"\1", sql)


def _code_words(sql: str) -> set[str]:
    """The lower-cased words of ``sql`` outside its comments."""
    return set(_WORDS.findall(_COMMENTS.sub(lambda m: m.group(1) or " ", sql).lower()))


@lru_cache(maxsize=1)
def _view_words() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Per view file: the names it creates and every word of its text (lower-cased)."""
    return {
        name: (
            frozenset(n.lower() for n in _CREATES.findall(sql_text(name))),
            frozenset(_code_words(sql_text(name))),
        )
        for name in VIEWS
    }


def views_for(sql: str) -> list[str]:
    """The view files ``sql`` needs (those creating a name it mentions, and theirs in turn), in
    creation order. Creating all of them binds a dozen views (~0.1 s); a query needs few.
    A word match may include a view too many (never one too few: a name not mentioned is not
    used); words in comments do not count (a header saying "one row per prompt" bound the
    ``prompts`` views, and through them ``runs``)."""
    index = _view_words()
    words = _code_words(sql)
    need: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, (creates, text) in index.items():
            if name not in need and creates & words:
                need.add(name)
                words |= text
                grew = True
    return [name for name in VIEWS if name in need]


# One in-memory database per process for ``connect(shared=True)``: opening a DuckDB database costs
# 30-60 ms (and starts its thread pool, which competes with a step's own reader threads); a
# cursor on an open one costs microseconds. Keyed by process id: a forked child opens its own.
_SHARED: dict[int, duckdb.DuckDBPyConnection] = {}
_SHARED_LOCK = threading.Lock()


def _open(database: str, threads: int | None, shared: bool) -> duckdb.DuckDBPyConnection:
    """A fresh database, or a new connection (cursor) on the process's shared one."""
    if not (shared and database == ":memory:" and not threads):
        con = duckdb.connect(database)
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        return con
    pid = os.getpid()
    with _SHARED_LOCK:
        base = _SHARED.get(pid)
        if base is None:
            base = _SHARED[pid] = duckdb.connect()
    return base.cursor()


def connect(
    logs: str | os.PathLike[str],
    runs: list[str] | None = None,
    *,
    database: str = ":memory:",
    threads: int | None = None,
    views: list[str] | None = None,
    shared: bool = False,
    snap: store_read.Snapshot | None = None,
    wide: bool = False,
    kept_facts: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the rollout-log views over ``logs`` (or the named runs).

    ``views``: create only these view files (``views_for(sql)``); default: all of ``VIEWS``.
    ``shared``: a connection on the process's one in-memory database instead of a database of
    its own (no ``threads``, a local store): what a step that connects once per call wants. Its
    views and macros are connection-local (TEMP), so connections never see each other's; but a
    database-wide setting (``threads``, ``memory_limit``, ``enable_external_access``) would
    reach every other: take an own database for those.

    The views read one snapshot of each run (the files its manifest listed when connecting),
    held while the connection lives, so a concurrent re-ingest or append never changes or
    removes what the connection's queries read. ``snap``: read this snapshot instead (its holder
    keeps and releases it; ``logs`` and ``runs`` are then unused).

    ``wide``: the source, views, macros and tables are database-wide, so every ``cursor()`` of
    the connection reads them (a server's one cursor per request); only on a database of its
    own (not with ``shared``).

    ``kept_facts``: the ``turn_facts`` view reads each part's kept facts
    (``pipelines/store/turn_facts.py``) when every part has them, instead of computing them from the
    turns (the report; not ``ddai serve``, whose locked-down connection reads files under the
    store only)."""
    if wide and shared:
        raise ValueError("connect(wide=True) needs a database of its own, not shared=True")
    own = snap is None
    snap = store_read.snapshot(logs, runs) if snap is None else snap
    files = snap.all_files()
    remote = bool(files) and objstore.is_url(files[0])
    try:
        # object storage registers filesystems with the database: never on the shared one
        con = _open(database, threads, shared and not remote)
    except BaseException:
        if own:
            snap.release()
        raise
    if own:
        snap.keep_while(con)
    # DuckDB draws its progress bar on stdout for queries over ~2 s: that would corrupt
    # `ddai query --format csv|json` written to stdout (and the report's own progress display).
    con.execute("SET enable_progress_bar = false")
    if remote:
        _remote_source(con, files, wide=wide)
    elif files:
        # DuckDB's own Parquet reader (about 2x faster than scanning an Arrow dataset); the file
        # list is passed as a value, never pasted into SQL text. Registered, the view is
        # connection-local (``create_view`` would make it database-wide).
        # union_by_name: partitions written before a column existed (``flags``, schema 1) read
        # it as null.
        _source(
            con,
            con.read_parquet([str(f) for f in files], hive_partitioning=False, union_by_name=True),
            wide=wide,
        )
    else:
        # An empty store still answers queries (with no rows).
        from ddai.pipelines.records import schema

        _source(con, schema.ROLLOUT_SCHEMA.empty_table(), wide=wide)
    names = VIEWS if views is None else views
    if "annotations" in names:  # the committed rows of the snapshot's runs
        from ddai.pipelines.store import annotations

        annotations_table(con, annotations.rows_of(snap.logs, snap.manifests), wide=wide)
    facts = None
    if kept_facts and "turn_facts" in names and files and not remote:
        from ddai.pipelines.store import turn_facts

        facts = turn_facts.cached(snap)
    _create_views(con, names, wide=wide, facts=facts)
    return con


def annotations_table(
    con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]], *, wide: bool = False
) -> None:
    """``annotations_src`` (the ``annotations`` view's source) holding ``rows``, side-table rows
    of ``ddai.pipelines.store.annotations``: a few thousand, passed as one bound JSON value, so no
    pyarrow is needed. ``wide``: database-wide rather than connection-local."""
    import json

    from ddai.pipelines.store import annotations

    keep = "" if wide else "TEMP "
    con.execute(
        f"CREATE OR REPLACE {keep}TABLE annotations_src AS "
        f"SELECT unnest(from_json($rows, '{annotations.duckdb_schema()}'), recursive := true)",
        {"rows": json.dumps(rows)},
    )


def _source(
    con: duckdb.DuckDBPyConnection, src: Any, *, wide: bool, name: str = "rollouts_src"
) -> None:
    """``rollouts_src`` (or ``name``) over ``src`` (a relation, an Arrow table or dataset):
    registered (connection-local), or a database-wide view every cursor reads (``wide``)."""
    if not wide:
        con.register(name, src)
    elif isinstance(src, duckdb.DuckDBPyRelation):
        src.create_view(name)
    else:
        con.from_arrow(src).create_view(name)


def _create_views(
    con: duckdb.DuckDBPyConnection,
    names: Iterable[str],
    *,
    wide: bool = False,
    facts: list[str] | None = None,
) -> None:
    """Execute the view files ``names`` (in the order given), each CREATE made TEMP (or, with
    ``wide``, each made database-wide). ``facts``: the kept ``turn_facts`` of every file of the
    source, in its order (``turn_facts.cached``), read instead of computing them."""
    for name in names:
        if name == "turn_facts" and facts:
            _source(con, con.read_parquet(facts), wide=wide, name=name)
            continue
        sql = sql_text(name)
        con.execute(database_wide(sql) if wide else _TEMP.sub(r"CREATE OR REPLACE TEMP \1", sql))


def _remote_source(con: duckdb.DuckDBPyConnection, files: list[Any], *, wide: bool = False) -> None:
    """``rollouts_src`` over object-storage files, by the scan ``DDAI_OBJSTORE_SCAN`` names."""
    how = objstore.scan()
    if how == "fsspec":
        objstore.register(con, files)
        con.read_parquet(
            [str(f) for f in files], hive_partitioning=False, union_by_name=True
        ).create_view("rollouts_src")
    else:
        # DuckDB pushes projections and filters into the Arrow dataset's scan.
        from ddai.pipelines import store

        _source(con, store.arrow_dataset(files), wide=wide)


def run_named(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | list[Any] | None = None
) -> pa.Table:
    """Run the query in ``sql/<name>.sql`` with bound parameters; returns an Arrow table."""
    return run_sql(con, sql_text(name), params)


def run_sql(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | list[Any] | None = None
) -> pa.Table:
    """``sql``'s result as an Arrow table (empty for a statement without a result)."""
    import pyarrow as pa

    rel = relation(con, sql, params)
    if rel is None:  # a statement without a result (DDL)
        return pa.table({})
    return rel.to_arrow_table()


def run_frame(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | list[Any] | None = None
) -> pl.DataFrame:
    """``sql``'s result as a polars frame (empty for a statement without a result), handed over
    through the Arrow C stream interface: the same columns and types as
    ``pl.from_arrow(run_sql(...))`` without importing pyarrow (and numpy with it: about 0.4 s of
    a command's start)."""
    import polars as pl

    rel = relation(con, sql, params)
    return pl.DataFrame() if rel is None else pl.DataFrame(rel)


def relation(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | list[Any] | None = None
) -> duckdb.DuckDBPyRelation | None:
    """``sql``'s result as a DuckDB relation, None for a statement without one (DDL): for
    callers that fetch rows or ``COPY`` it to a file, which need no pyarrow."""
    return con.sql(sql, params=params or None)
