"""``ddai runs``'s per-run statistics, kept beside the store by what they are computed from.

The ``runs`` view (``sql/runs.sql``) aggregates every rollout of a run (counts, steps, success
rate, means), which no manifest holds; computing it takes DuckDB (0.1–0.3 s to import and open)
and a scan. A run's row depends on its rollout files only, so ``_stats/<run>.json`` keeps it under
a ``key`` over the manifest's file list (names and sha256) and the SQL files: a commit that adds
only side tables, notes or metrics leaves it valid, one that changes a rollout file (ingest,
append, re-score) does not, nor does a ddai whose SQL differs.

Two ways in: ``refresh`` (called by writers right after their commit, outside the run's write
lock, and holding no readers' lock either) computes the rows of the runs it is given from their
committed files and keeps them, so the next ``ddai runs`` reads JSON and imports no DuckDB;
``runs_rows`` (``ddai runs``) takes each run's row when its key matches the run's committed
version and computes only the others. A row is keyed by the manifest it was computed from, so a
commit racing a refresh leaves at most a row of the older version, which no reader of the newer
one takes (and none is written once the run moved on). Readers of the store ignore ``_``-prefixed
paths. A store on object storage, or one this user cannot write, is computed every time and
nothing is written; a failed refresh never fails the commit before it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddai.pipelines.store import io, objstore, store_read

STATS_DIR = store_read.STATS_DIR
SQL = "SELECT * FROM runs"


def _definition() -> str:
    """The digest of every SQL file of ``ddai.sql``: a row computed by other SQL is not reused.
    (Read from the package's folder: ``importlib.resources`` costs ``ddai runs`` ~10 ms of
    imports.)"""
    from ddai import sql

    folder = Path(sql.__file__).parent
    texts = sorted((p.name, p.read_text(encoding="utf-8")) for p in folder.glob("*.sql"))
    return io.sha256_text(json.dumps(texts))


def key(manifest: dict[str, Any], definition: str) -> str:
    """What a cached row must have been computed from: the run's rollout files (their names and
    sha256, as its manifest lists them: a replace by identical rows in new files is a new key) and
    the SQL. A manifest from before file lists is keyed by its whole version."""
    files = manifest.get("files")
    if files is None:
        basis = "manifest " + store_read.manifest_version(manifest)
    else:
        basis = json.dumps([[f["name"], f["sha256"]] for f in files])
    return io.sha256_text(basis + "\n" + definition)


def stats_path(logs: str | os.PathLike[str], run: str) -> Path:
    return Path(logs) / STATS_DIR / f"{store_read.check_run_id(run)}.json"


def _cached(logs: str | os.PathLike[str], run: str, want: str) -> dict[str, Any] | None:
    """The cached entry of ``run`` when its key is ``want``, else None."""
    try:
        entry = json.loads(stats_path(logs, run).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and entry.get("key") == want and entry.get("run") == run
    return entry if ok else None


def _keep(
    logs: str | os.PathLike[str], run: str, k: str, definition: str, row: dict[str, Any] | None
) -> bool:
    """Write ``run``'s row keyed ``k`` unless the run has committed other rollout files since
    (such a row would never be read, and would replace the newer one its writer keeps); True
    when written."""
    try:
        now = store_read.run_manifest(logs, run)
        if now is None or key(now, definition) != k:
            return False
        io.write_json(stats_path(logs, run), {"key": k, "run": run, "row": row})
    except (OSError, ValueError):  # a store this user may read but not write: computed next time
        return False
    return True


def _compute(snap: store_read.Snapshot, runs: list[str]) -> dict[str, dict[str, Any]]:
    """The ``runs`` view's row of each of ``runs`` (none for a run without rollouts), read from
    ``snap``'s files."""
    from ddai.pipelines.store import query  # DuckDB: only when a row is computed

    part = store_read.Snapshot(
        snap.logs, {r: snap.manifests[r] for r in runs}, {r: snap.files[r] for r in runs}
    )
    # the process's shared database: a writer that queried already has it open (30-60 ms)
    con = query.connect(snap.logs, snap=part, views=query.views_for(SQL), shared=True)
    try:
        rel = con.sql(SQL)
        rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    finally:
        con.close()
    return {r["run_id"]: r for r in rows}


def _rows(
    logs: str | os.PathLike[str], snap: store_read.Snapshot, runs: list[str]
) -> tuple[dict[str, dict[str, Any] | None], set[str]]:
    """The row of each of ``runs`` of ``snap`` (None: no rollouts): kept rows whose key matches
    the snapshot's manifest, the others computed from the snapshot's files and kept (local
    stores); and the runs whose row is kept now."""
    remote = objstore.is_url(logs)
    definition = _definition()
    keys = {r: key(snap.manifests[r], definition) for r in runs}
    rows: dict[str, dict[str, Any] | None] = {}
    kept: set[str] = set()
    for r in runs:
        hit = None if remote else _cached(logs, r, keys[r])
        if hit is not None:
            rows[r] = hit["row"]
            kept.add(r)
    missing = [r for r in runs if r not in rows]
    if missing:
        computed = _compute(snap, missing)
        for r in missing:
            rows[r] = computed.get(r)
            if not remote and _keep(logs, r, keys[r], definition, rows[r]):
                kept.add(r)
    return rows, kept


def runs_rows(logs: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One row per run of the store with rollouts, ordered by run id: the ``runs`` view's."""
    with store_read.snapshot(logs) as snap:
        rows, _ = _rows(logs, snap, list(snap.manifests))
    return [row for _, row in sorted(rows.items()) if row is not None]


def refresh(logs: str | os.PathLike[str], runs: list[str]) -> bool:
    """Keep the rows of ``runs`` (just committed to the local store ``logs``) for the next
    ``ddai runs``: computed from their committed versions (``_unpinned``; a run whose kept row
    still matches its rollout files is not computed again). Call after the commit, outside the
    runs' write locks.

    Never raises for the cache's sake: a failure (an unwritable ``_stats``, a run gone, an error
    computing the rows) leaves the commit as it is and the rows to the next listing; returns
    whether every row is now kept. Object storage: nothing is kept, nothing done."""
    if not runs or objstore.is_url(logs):
        return False
    try:
        snap = _unpinned(logs, runs)
        _, kept = _rows(logs, snap, list(snap.manifests))
    except Exception:  # the cache must never fail the commit it follows
        return False
    return kept >= set(runs)


def _unpinned(logs: str | os.PathLike[str], runs: list[str]) -> store_read.Snapshot:
    """The committed version of each of ``runs`` (its manifest and the files it lists), read
    without the readers' lock: a writer that commits meanwhile then removes the files it
    superseded at once instead of leaving them to its next write (concurrent writers refreshing
    would otherwise each defer the others'). Committed files are never changed, only removed,
    so a read of them either sees exactly what the manifest lists or fails (nothing kept)."""
    manifests: dict[str, dict[str, Any]] = {}
    files: dict[str, list[Path]] = {}
    for r in runs:
        man = store_read.run_manifest(logs, r)
        if man is not None:
            manifests[r] = man
            files[r] = store_read.committed_files(store_read.partition_dir(logs, r), man)
    return store_read.Snapshot(Path(logs), manifests, files)
