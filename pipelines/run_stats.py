"""``ddai runs``'s per-run statistics, kept beside the store by manifest version.

The ``runs`` view (``sql/runs.sql``) aggregates every rollout of a run (counts, steps, success
rate, means), which no manifest holds; computing it takes DuckDB (0.1–0.3 s to import and open)
and a scan. ``runs_rows`` takes a run's row from ``_stats/<run>.json`` when that row was computed
from the run's current manifest and the current SQL files (its ``key``), and computes only the
other runs, in one query over one snapshot, writing their rows there (atomically). Every commit
(ingest, append, re-score) writes a new manifest, so the run's next listing computes it again, as
does a ddai whose SQL differs. Readers of the store ignore ``_``-prefixed paths. A store on
object storage, or one this user cannot write, is computed every time and nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ddai.pipelines import io, objstore, store_read

STATS_DIR = "_stats"
SQL = "SELECT * FROM runs"


def _definition() -> str:
    """The digest of every SQL file of ``ddai.sql``: a row computed by other SQL is not reused."""
    files = resources.files("ddai.sql")
    texts = sorted(
        (p.name, p.read_text(encoding="utf-8")) for p in files.iterdir() if p.name.endswith(".sql")
    )
    return io.sha256_text(json.dumps(texts))


def key(manifest: dict[str, Any], definition: str) -> str:
    """What a cached row must have been computed from: the run's version and the SQL."""
    return io.sha256_text(store_read.manifest_version(manifest) + "\n" + definition)


def stats_path(logs: str | os.PathLike[str], run: str) -> Path:
    return Path(logs) / STATS_DIR / f"{store_read.check_run_id(run)}.json"


def _cached(logs: str | os.PathLike[str], run: str, want: str) -> dict[str, Any] | None:
    """The cached entry of ``run`` when its key is ``want``, else None."""
    try:
        entry = json.loads(stats_path(logs, run).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("key") == want else None


def _keep(logs: str | os.PathLike[str], run: str, k: str, row: dict[str, Any] | None) -> None:
    # a store this user may read but not write: computed again next time
    with contextlib.suppress(OSError):
        io.write_json(stats_path(logs, run), {"key": k, "run": run, "row": row})


def _compute(snap: store_read.Snapshot, runs: list[str]) -> dict[str, dict[str, Any]]:
    """The ``runs`` view's row of each of ``runs`` (none for a run without rollouts), read from
    ``snap``'s files."""
    from ddai.pipelines import query  # DuckDB: only when a row is computed

    part = store_read.Snapshot(
        snap.logs, {r: snap.manifests[r] for r in runs}, {r: snap.files[r] for r in runs}
    )
    con = query.connect(snap.logs, snap=part, views=query.views_for(SQL))
    try:
        rel = con.sql(SQL)
        rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    finally:
        con.close()
    return {r["run_id"]: r for r in rows}


def runs_rows(logs: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One row per run of the store with rollouts, ordered by run id: the ``runs`` view's."""
    remote = objstore.is_url(logs)
    with store_read.snapshot(logs) as snap:
        definition = _definition()
        keys = {r: key(m, definition) for r, m in snap.manifests.items()}
        rows: dict[str, dict[str, Any] | None] = {}
        for r in snap.manifests:
            hit = None if remote else _cached(logs, r, keys[r])
            if hit is not None:
                rows[r] = hit["row"]
        missing = [r for r in snap.manifests if r not in rows]
        if missing:
            computed = _compute(snap, missing)
            for r in missing:
                rows[r] = computed.get(r)
                if not remote:
                    _keep(logs, r, keys[r], rows[r])
    return [row for _, row in sorted(rows.items()) if row is not None]
