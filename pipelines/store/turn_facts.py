"""Each rollout's turn facts (``sql/turn_facts.sql``) computed once per immutable part and kept.

A report derives a dozen facts per rollout from its turns and pages (actions counted, repeated
queries, forced and valued turns, the first golden page's rank, a shared document); at 1M
rollouts that was 3.4 CPU s of the command's 8, most of it DuckDB decoding every field of every
turn (bench/README.md, "Report"). The facts take no parameter, and a store's parts never change
once committed (a rewrite commits new parts under new names, with new digests), so they are
computed once per part and kept in the workspace, ``<home>/cache/turn_facts/``, one Parquet file
per part named by the part's sha256 (from its run's manifest) and by the facts' SQL: a part's
facts are found whichever run or store lists it, and an edit of the SQL computes them again.

``ensure`` fills the cache for the parts of a store's runs (the report calls it before it reads);
``query.connect(kept_facts=True)`` (the report's) reads the ``turn_facts`` view from the cache
when every part of its snapshot has its file there (``cached``), else computes it from the turns
(the view file), as every other connection does: the same rows either way (``ddai serve``'s
connection, locked to the store's folder, computes them). A store on object storage is not cached (its parts would
be downloaded to compute them; the view reads them as before). The cache is small (1.7 MB per
million rollouts) and nothing removes it but deleting the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ddai.pipelines.store import objstore, store_read, workspace

VIEW = "turn_facts"


def cache_dir() -> Path:
    return workspace.home() / "cache" / VIEW


def _sql(name: str) -> str:
    # ``query.sql_text``'s read, here because ``query.connect`` imports this module
    return resources.files("ddai.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _sql_key() -> str:
    """A digest of the SQL that computes the facts (the view and the macros it calls)."""
    text = _sql("macros") + _sql(VIEW)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _digests(snap: store_read.Snapshot) -> list[str] | None:
    """Each of the snapshot's files' recorded sha256, in ``all_files`` order; None when a
    manifest does not list one (written before file lists) or the store is on object storage."""
    if objstore.is_url(snap.logs):
        return None
    out: list[str] = []
    for run, man in snap.manifests.items():
        listed = man.get("files")
        if listed is None or len(listed) != len(snap.files[run]):
            return None
        for f in listed:
            if not f.get("sha256"):
                return None
            out.append(f["sha256"])
    return out


def _path(digest: str) -> Path:
    return cache_dir() / f"{digest}-{_sql_key()}.parquet"


def cached(snap: store_read.Snapshot) -> list[str] | None:
    """The cache files of the snapshot's parts, in its file order, when every part has one."""
    digests = _digests(snap)
    if not digests:
        return None
    paths = [_path(d) for d in digests]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else None


def ensure(
    logs: str | os.PathLike[str], runs: Sequence[str] | None = None, *, threads: int | None = None
) -> int:
    """Compute and keep the facts of the parts of ``runs`` (default: every run) of a local store
    that have none in the cache, on ``threads`` DuckDB threads (default: one per core); returns
    how many parts it computed (0 on object storage, or when the workspace cannot be written:
    the view then computes them on every read)."""
    import duckdb

    with store_read.snapshot(logs, list(runs) if runs else None) as snap:
        digests = _digests(snap)
        if not digests:
            return 0
        todo = [(f, _path(d)) for f, d in zip(snap.all_files(), digests, strict=True)]
        todo = [(f, p) for f, p in todo if not p.is_file()]
        if not todo:
            return 0
        try:
            cache_dir().mkdir(parents=True, exist_ok=True)
        except OSError:
            return 0
        con = duckdb.connect()
        try:
            con.execute("SET enable_progress_bar = false")
            if threads:
                con.execute(f"SET threads = {int(threads)}")
            con.execute(_sql("macros"))
            for part, path in todo:
                _compute(con, part, path)
        except OSError:
            return 0
        finally:
            con.close()
    return len(todo)


def _compute(con: Any, part: Path, path: Path) -> None:
    """One part's facts into ``path`` (two writers of the same part write the same rows)."""
    con.register("rollouts", con.read_parquet(str(part)))
    con.execute(_sql(VIEW).replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMP VIEW"))
    try:
        copy_parquet(con, VIEW, path)
    finally:
        con.unregister("rollouts")


def copy_parquet(con: Any, table: str, path: Path) -> None:
    """``table``'s rows on ``con`` as a zstd Parquet file at ``path``, written under a temp name
    and renamed (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        where = "'" + tmp.as_posix().replace("'", "''") + "'"
        con.execute(f"COPY (SELECT * FROM {table}) TO {where} (FORMAT parquet, COMPRESSION zstd)")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
