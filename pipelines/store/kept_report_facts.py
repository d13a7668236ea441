"""The report's per-rollout facts (``sql/report_facts.sql``) kept per part and per parameter set.

The ``report_facts`` table (rollouts beside their kept turn facts, plus columns derived from the
report's thresholds and ``max_turns``) took 0.84 s of a 1M report's 3.1 (bench/README.md, "Whole
commands at low load, end of the third pass"). Its rows depend only on a part's rows, the SQL and
those six parameters, and a store's parts never change once committed, so each part's rows are
computed once and kept beside the turn facts, ``<home>/cache/report_facts/``: one Parquet file per
part named by the part's sha256, a digest of the SQL (the table's file and every view file it
reads) and a digest of the parameters ($threshold, $judge_high, $ndcg_low, $judge_low,
$ndcg_high, $max_turns). A report with other thresholds gets files of its own.

``kept`` returns the files of a snapshot's parts in its file order, computing (and keeping) those
missing; ``None`` where they cannot be kept (a store on object storage, a manifest without
digests, a workspace that cannot be written, a part the query cannot read alone): the report
then builds the table from the log as before. Reading the files in order gives the rows in the
order the query over the whole log gives (one part after another, each in its order). As with
the turn facts, nothing removes the cache but deleting the folder (a few MB per million rollouts
and parameter set).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddai.pipelines.store import query, store_read, turn_facts, workspace

TABLE = "report_facts"
# the statement that builds the table; what precedes it (the TEMP macros) is run on every read
_CREATE = re.compile(r"CREATE\s+OR\s+REPLACE\s+TEMP\s+TABLE\s+report_facts\s+AS\b", re.I)
_PARAM_RE = re.compile(r"\$([A-Za-z_]\w*)")


def cache_dir() -> Path:
    return workspace.home() / "cache" / TABLE


def macros_sql() -> str:
    """``sql/report_facts.sql``'s macro definitions, without the table (run where the table is
    read from the kept files: the browser and the explorer call them)."""
    sql = query.sql_text(TABLE)
    m = _CREATE.search(sql)
    if m is None:
        raise ValueError("sql/report_facts.sql no longer creates TEMP TABLE report_facts")
    return sql[: m.start()]


def _params(sql: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters ``sql`` names, from ``params`` (DuckDB rejects extra ones)."""
    return {k: params[k] for k in sorted(set(_PARAM_RE.findall(sql)))}


def _key(params: Mapping[str, Any]) -> str:
    """A digest of the SQL that computes the table (its file and the view files it reads) and
    of the values of the parameters it takes."""
    sql = query.sql_text(TABLE)
    text = "\n".join(query.sql_text(v) for v in query.views_for(sql)) + sql
    text += json.dumps(_params(sql, params), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def kept(
    snap: store_read.Snapshot, params: Mapping[str, Any], *, threads: int | None = None
) -> list[str] | None:
    """The kept ``report_facts`` rows of every part of ``snap`` for ``params`` (the report's
    ``sql_params()``), in its file order, computing those missing on ``threads`` DuckDB threads;
    None when they cannot be kept (the caller then computes the table from the log)."""
    digests = turn_facts._digests(snap)
    if not digests:
        return None
    import duckdb

    key = _key(params)
    rows = [f.get("rows") for run in snap.manifests for f in snap.manifests[run]["files"]]
    paths = [cache_dir() / f"{d}-{key}.parquet" for d in digests]
    check = duckdb.connect()
    try:
        todo = [
            (part, d, p)
            for part, d, p, n in zip(snap.all_files(), digests, paths, rows, strict=True)
            if not _whole(check, p, n)
        ]
    finally:
        check.close()
    try:
        if todo:
            cache_dir().mkdir(parents=True, exist_ok=True)
        for part, digest, path in todo:
            _compute(part, digest, path, params, threads)
    except (OSError, duckdb.Error):
        return None
    return [str(p) for p in paths]


def _whole(con: Any, path: Path, rows: int | None) -> bool:
    """Whether ``path`` is a readable Parquet file with the part's ``rows`` (when its manifest
    says): a truncated or foreign file is computed again (its footer alone is read)."""
    import duckdb

    if not path.is_file():
        return False
    try:
        where = "'" + path.as_posix().replace("'", "''") + "'"
        (n,) = con.execute(f"SELECT sum(num_rows) FROM parquet_file_metadata({where})").fetchone()
    except duckdb.Error:
        return False
    return rows is None or n == rows


def read(con: Any, files: list[str], *, wide: bool) -> None:
    """``report_facts`` (and its macros) on ``con`` from the kept ``files``, in their order;
    database-wide with ``wide`` (every cursor reads it), else TEMP."""
    macros = macros_sql()
    con.execute(query.database_wide(macros) if wide else macros)
    keep = "" if wide else "TEMP "
    con.execute(
        f"CREATE OR REPLACE {keep}TABLE {TABLE} AS SELECT * FROM read_parquet($files)",
        {"files": files},
    )


def _compute(
    part: Path, digest: str, path: Path, params: Mapping[str, Any], threads: int | None
) -> None:
    """One part's ``report_facts`` rows into ``path`` (``turn_facts.copy_parquet``), its turn
    facts read from their kept file when there is one."""
    import duckdb

    sql = query.sql_text(TABLE)
    facts = turn_facts._path(digest)
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        # the same source ``query.connect`` reads, over this part alone
        con.register(
            "rollouts_src",
            con.read_parquet(str(part), hive_partitioning=False, union_by_name=True),
        )
        query._create_views(
            con, query.views_for(sql), facts=[str(facts)] if facts.is_file() else None
        )
        con.execute(sql, _params(sql, params))
        turn_facts.copy_parquet(con, TABLE, path)
    finally:
        con.close()
