"""An ingest's quarantine, committed with its data: one part per ingest and run, listed at commit.

Each ingest writes its quarantined lines of run ``R`` as one new part,
``_quarantine/R/part-<ns>-<id>.jsonl`` (locally renamed into place, on object storage put under
that unique name), BEFORE its commit and unlisted: readers read only the parts a commit lists.
The commit that lists it is the one that makes the ingest's rows visible:

- the run's manifest (the next delta of ``run_id=R/_log/``) when the ingest commits rollouts or
  side rows of ``R``: key ``quarantine``, ``{"rows", "sha256", "parts": [...]}`` (each part:
  ``name``, ``rows``, ``sha256``, ``ingest``, ``sources``, the source files' sha256);
- else (every row of the run quarantined, or a replace that keeps the committed run as it is)
  the run's quarantine log, ``_quarantine/R/_log/<seq>.json`` (``manifest_log``, the same
  protocol: a hard link locally, a conditional create on object storage), listing the parts the
  same way.

So an ingest killed before its commit leaves no entry anyone reads (its part is collected by the
next write of the run) and a rerun never shows an entry twice. Entries accumulate across ingests:
every commit lists the parts listed before. A store written before parts (one
``_quarantine/R.jsonl``) is still read, first; on object storage, per-ingest parts written before
they were listed are read whole while no commit of the run lists a quarantine.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from ddai.pipelines.store import io, locks, manifest_log, objstore
from ddai.pipelines.store.store_read import (
    QUARANTINE_DIR,
    check_run_id,
    run_manifest,
    side_parts_record,
)

KEY = "quarantine"


def part_name() -> str:
    """A new part's name (names sort in write order)."""
    return f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.jsonl"


def run_dir(logs: str | os.PathLike[str], run: str) -> Any:
    """``run``'s quarantine folder (a path, or a URL on object storage): its parts and log."""
    url = objstore.url_of(logs)
    if url is not None:
        return objstore.join(url, QUARANTINE_DIR, check_run_id(run))
    return Path(logs) / QUARANTINE_DIR / check_run_id(run)


def legacy_path(logs: str | os.PathLike[str], run: str) -> Any:
    """The one file a store written before parts holds (``_quarantine/<run>.jsonl``)."""
    url = objstore.url_of(logs)
    if url is not None:
        return objstore.join(url, QUARANTINE_DIR, f"{check_run_id(run)}.jsonl")
    return Path(logs) / QUARANTINE_DIR / f"{check_run_id(run)}.jsonl"


def merged(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    """The listing after a commit: ``old``'s parts (what was listed), then ``new``'s."""
    before = list((old or {}).get("parts") or [])
    names = {p["name"] for p in before}
    added = [p for p in (new or {}).get("parts") or [] if p["name"] not in names]
    if not before and not added:
        return old
    return side_parts_record([*before, *added])


def listed(logs: str | os.PathLike[str], run: str) -> list[dict[str, Any]]:
    """The parts of ``run`` a commit lists (the run's manifest, then its quarantine log), in
    write order; None entries never."""
    parts: dict[str, dict[str, Any]] = {}
    for man in (run_manifest(logs, run), manifest_log.read_state(run_dir(logs, run)).manifest):
        for p in ((man or {}).get(KEY) or {}).get("parts") or []:
            parts.setdefault(p["name"], p)
    return [parts[n] for n in sorted(parts)]


def _any_listing(logs: str | os.PathLike[str], run: str) -> bool:
    if KEY in (run_manifest(logs, run) or {}):
        return True
    return manifest_log.is_committed(run_dir(logs, run))


def adopted(
    logs: str | os.PathLike[str], run: str, old: dict[str, Any] | None
) -> dict[str, Any] | None:
    """On object storage, the listing a run's first listing commit starts from: the parts that
    ingests put before parts were listed (all read, as they were) when neither ``old`` (the
    run's manifest) nor its quarantine log lists any yet; else ``old``'s listing."""
    url = objstore.url_of(logs)
    if url is None or KEY in (old or {}) or manifest_log.is_committed(run_dir(logs, run)):
        return (old or {}).get(KEY)
    base = run_dir(logs, run)
    parts = []
    for name in sorted(manifest_log.listdir_fresh(base)):
        if name.endswith(".jsonl") and name[0] != ".":
            data = objstore.read_bytes(objstore.join(base, name))
            rows = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
            parts.append({"name": name, "rows": rows, "sha256": io.sha256_bytes(data)})
    return side_parts_record(parts) if parts else None


def read(logs: str | os.PathLike[str], run: str) -> bytes:
    """``run``'s committed quarantine lines: the file of a store written before parts, then each
    listed part in write order."""
    url = objstore.url_of(logs)
    objs: list[Any] = []
    legacy = legacy_path(logs, run)
    if objstore.any_isfile(legacy):
        objs.append(legacy)
    base = run_dir(logs, run)
    names = [p["name"] for p in listed(logs, run)]
    if url is not None and not names and not _any_listing(logs, run):
        # parts put before commits listed them (every ingest's, unlisted): read as before
        names = sorted(
            n for n in manifest_log.listdir_fresh(base) if n.endswith(".jsonl") and n[0] != "."
        )
    objs += [objstore.join(base, n) if url else base / n for n in names]
    out = []
    for o in objs:
        data = objstore.read_bytes(o) if url else Path(o).read_bytes()
        out.append(data if not data or data.endswith(b"\n") else data + b"\n")
    return b"".join(out)


def verify(logs: str | os.PathLike[str], run: str, man: dict[str, Any]) -> list[str]:
    """What differs between the parts ``man`` (a committed manifest) lists and the files."""
    url = objstore.url_of(logs)
    base = run_dir(logs, run)
    bad = []
    for p in (man.get(KEY) or {}).get("parts") or []:
        fp = objstore.join(base, p["name"]) if url else base / p["name"]
        if why := io.differs(fp, p["sha256"]):
            bad.append(f"quarantine part {p['name']} {why}")
    return bad


def commit_log(
    logs: str | os.PathLike[str],
    run: str,
    parts: list[dict[str, Any]],
    *,
    journal: Any = None,
    undo: Any = None,
    tries: int = 8,
) -> None:
    """List ``parts`` (written already) in ``run``'s quarantine log: the commit of an ingest
    that commits no rollouts of the run. Local: call under the run's write lock (``journal``:
    ``rollback.Journal``). Object storage: a conditional create, merged again over a commit
    that won the race (``undo``: a ``rollback.RemoteUndo`` to note it in)."""
    base = run_dir(logs, run)
    for _ in range(tries):
        state = manifest_log.read_state(base)
        old = state.manifest
        before = (old or {}).get(KEY) if old else adopted(logs, run, run_manifest(logs, run))
        new = {"run_id": run, KEY: merged(before, side_parts_record(parts))}
        try:
            done = manifest_log.commit(base, new, state, journal=journal)
        except objstore.ConflictError:
            continue
        if undo is not None:
            undo.part_url, undo.seq, undo.before = base, done.seq, old
        return
    raise objstore.ConflictError(
        f"run {run!r}: {tries} concurrent quarantine commits beat this one"
    )


def ingested_by(logs: str | os.PathLike[str], run: str, hashes: list[str]) -> str | None:
    """The id of a committed ingest of ``run`` that read exactly the source files with sha256
    ``hashes`` (its manifest, its history, or a listed quarantine part records them), else None:
    an ``--append`` retried after its commit is recognised by it."""
    want = sorted(hashes)
    if not want:
        return None
    man = run_manifest(logs, run) or {}
    for entry in [man, *reversed(man.get("history") or [])]:
        srcs = entry.get("sources") or []
        if srcs and sorted(s.get("sha256", "") for s in srcs) == want and entry.get("ingest"):
            return str(entry["ingest"])
    for p in reversed(listed(logs, run)):
        if sorted(p.get("sources") or []) == want and p.get("ingest"):
            return str(p["ingest"])
    return None


def collect_garbage(
    logs: str | os.PathLike[str], run: str, *, now: float | None = None
) -> list[str]:
    """Remove ``run``'s quarantine parts no commit lists (an ingest killed before its commit)
    and temp files a killed write left there. Local: call under the run's write lock (parts
    appear there only under it); object storage: only those older than the grace period."""
    base = run_dir(logs, run)
    keep = {p["name"] for p in listed(logs, run)} | {manifest_log.MANIFEST, manifest_log.LOG_DIR}
    removed = []
    url = objstore.url_of(logs)
    if url is not None:
        if not _any_listing(logs, run):
            return []  # a store from before listings: its parts are all read
        fresh = manifest_log.listdir_fresh(base)
        return objstore.remove_stale(base, [n for n in fresh if n not in keep], now=now)
    base = Path(base)
    if not base.is_dir():
        return []
    for tmp in manifest_log.stale_temps(base):
        tmp.unlink(missing_ok=True)
        removed.append(f"{manifest_log.LOG_DIR}/{tmp.name}")
    for entry in base.iterdir():
        if entry.name in keep:
            continue
        if entry.name.startswith(".") and not locks.is_abandoned(entry):
            continue  # a temp file still being written
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed
