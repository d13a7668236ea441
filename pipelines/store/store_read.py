"""The log store's read side: run ids, partitions, manifests and snapshots, without pyarrow.

Reading which runs a store holds and which files their manifests list needs JSON and file locks
only; ``ddai runs`` and ``ddai query`` (DuckDB reads the files) start without importing pyarrow
(~0.3 s) through this module. ``ddai.pipelines.store`` (the writers and the commit protocol,
described there) re-exports every name here, so ``store.snapshot`` and ``store.MANIFEST`` read as
before.
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.store import io, locks, manifest_log, objstore
from ddai.pipelines.store.manifest_log import LOG_DIR, MANIFEST  # noqa: F401 (re-exported)

QUARANTINE_DIR = "_quarantine"
SIDE_DIR = "_side"
LOCK_DIR = "_locks"
STATS_DIR = "_stats"  # ``ddai runs``'s rows (``run_stats``)


_SAFE_RUN_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:+@")


def check_run_id(run_id: str) -> str:
    """Run ids become folder names: refuse separators and other unsafe characters."""
    if not run_id or run_id.startswith((".", "_")) or not set(run_id) <= _SAFE_RUN_CHARS:
        raise ValueError(
            f"run id {run_id!r} is not usable as a folder name; use letters, digits and . _ - : + @ "
            "(not starting with . or _)"
        )
    return run_id


def partition_dir(logs: str | os.PathLike[str], run_id: str) -> Path:
    return Path(logs) / f"run_id={check_run_id(run_id)}"


def _lock_file(logs: str | os.PathLike[str], run_id: str, kind: str) -> Path:
    return Path(logs) / LOCK_DIR / f"{check_run_id(run_id)}.{kind}"


def manifest_version(man: dict[str, Any]) -> str:
    """The version of a committed run: the digest of its manifest (every commit changes it)."""
    return io.sha256_text(json.dumps(man, sort_keys=True, ensure_ascii=False, default=str))


def refuse_file_store(logs: str | os.PathLike[str]) -> None:
    """FileNotFoundError when a local ``logs`` is a file: a store is a folder, and a file read as
    one would answer "no runs" (a reader) or fail on its first mkdir (a writer)."""
    if objstore.url_of(logs) is None and os.path.isfile(logs):
        raise FileNotFoundError(
            f"log store {logs} is a file, not a folder: pass the log store's folder as --logs"
        )


def logs_or_fail(logs: Path) -> Path:
    """``logs`` when the log store exists, else FileNotFoundError saying how to make one."""
    refuse_file_store(logs)
    if not objstore.any_exists(logs):
        if url := objstore.url_of(logs):  # a missing bucket, not a store to ingest into
            objstore.require_bucket(url)
        where = objstore.display(logs)
        raise FileNotFoundError(
            f"log store {where} does not exist; ingest logs first (`ddai ingest FILE --logs {where}`) "
            "or pass --logs"
        )
    return logs


def committed_files(part: str | os.PathLike[str], man: dict[str, Any] | None = None) -> list[Any]:
    """The data files of the committed version of partition ``part`` (none without a manifest):
    paths, or URLs (``str``) for a partition on object storage.

    A manifest from before file lists existed covers every ``*.parquet`` of the partition."""
    p = Path(part)
    man = man if man is not None else _read_manifest(p)
    if man is None:
        return []
    url = objstore.url_of(part)
    if url is not None:
        if "files" in man:
            return [objstore.join(url, f["name"]) for f in man["files"]]
        names = objstore.listdir(url)
        return [objstore.join(url, n) for n in names if n.endswith(".parquet") and n[0] not in "_."]
    if "files" in man:
        return [p / f["name"] for f in man["files"]]
    return sorted(f for f in p.glob("*.parquet") if not f.name.startswith(("_", ".")))


def _read_manifest(part: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The committed manifest of partition ``part``: its checkpoint (``_manifest.json``) with the
    log's later deltas applied (``manifest_log``); None when the run is not committed."""
    return manifest_log.read_state(part).manifest


def files_digest(files: list[dict[str, Any]]) -> str:
    """The digest of a partition's files (``name:sha256`` lines; an input's recorded hash, which a funnel step
    computes without the writers' imports)."""
    return io.sha256_text("\n".join(f"{f['name']}:{f['sha256']}" for f in files))


def side_parts_record(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest record listing ``parts`` (a side table's, a run's quarantine's): total rows,
    the digest over the parts, the parts."""
    return {"rows": sum(p["rows"] for p in parts), "sha256": files_digest(parts), "parts": parts}


def partition_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The committed manifest of ``path`` when it is a run's partition (a folder or URL holding a
    manifest checkpoint or log), else None (any other file or folder)."""
    if not objstore.is_url(path) and not Path(path).is_dir():
        return None
    return _read_manifest(path)


def list_runs(logs: str | os.PathLike[str]) -> list[str]:
    """The committed runs of the store (a partition without a committed manifest, checkpoint or
    log entry, is not one)."""
    url = objstore.url_of(logs)
    if url is not None:
        parts = [n for n in objstore.listdir(url) if n.startswith("run_id=")]
        return sorted(
            n.split("=", 1)[1] for n in parts if manifest_log.is_committed(objstore.join(url, n))
        )
    p = Path(logs)
    if not p.is_dir():
        return []
    return sorted(
        d.name.split("=", 1)[1]
        for d in p.iterdir()
        if d.is_dir() and d.name.startswith("run_id=") and manifest_log.is_committed(d)
    )


def run_manifest(logs: str | os.PathLike[str], run_id: str) -> dict[str, Any] | None:
    return _read_manifest(partition_dir(logs, run_id))


@dataclass
class Snapshot:
    """One consistent version of each of ``runs``: their manifests and the files they list.

    Holds a shared lock per run until ``release`` (or until it is garbage-collected), so no
    writer removes the listed files meanwhile; writers never wait for readers."""

    logs: Path
    manifests: dict[str, dict[str, Any]]
    files: dict[str, list[Path]]
    _held: list[locks.Shared] = field(default_factory=list, repr=False)

    def all_files(self) -> list[Path]:
        return [f for r in self.manifests for f in self.files[r]]

    def release(self) -> None:
        for lk in self._held:
            lk.release()
        self._held.clear()

    def keep_while(self, owner: object) -> None:
        """Hold the locks as long as ``owner`` lives (a lazy dataset, a DuckDB connection)."""
        held = list(self._held)
        self._held.clear()
        weakref.finalize(owner, _release_all, held)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _release_all(held: list[locks.Shared]) -> None:
    for lk in held:
        lk.release()


def snapshot(logs: str | os.PathLike[str], runs: list[str] | None = None) -> Snapshot:
    """Lock and read one version of ``runs`` (default: every committed run).

    Raises FileNotFoundError naming runs that are not committed in the store."""
    root = Path(logs)
    wanted = list(dict.fromkeys(runs)) if runs else list_runs(root)
    for r in wanted:
        check_run_id(r)
    snap = Snapshot(root, {}, {})
    missing = []
    remote = objstore.is_url(logs)
    try:
        for r in wanted:
            part = partition_dir(root, r)
            if not remote and not part.is_dir():
                # not committed: no lock to take, and a reader never makes the store's folders
                # (a failed read would leave a store of locks that `runs` takes for an empty one)
                missing.append(r)
                continue
            # a read-only store: nobody writes it, nothing to lock against (object storage has
            # no locks: its superseded parts outlive readers by a grace period instead)
            with contextlib.suppress(OSError):
                if not remote:
                    snap._held.append(locks.Shared(_lock_file(root, r, "readers")))
            man = _read_manifest(part)
            if man is None:
                missing.append(r)
                continue
            snap.manifests[r] = man
            snap.files[r] = committed_files(part, man)
    except BaseException:
        snap.release()
        raise
    if missing:
        snap.release()
        known = ", ".join(list_runs(logs)) or "none"
        half = [r for r in missing if objstore.any_isdir(partition_dir(root, r))]
        hint = (
            f" ({', '.join(half)}: a partition without {MANIFEST}, left by an interrupted write; "
            "ingest it again)"
            if half
            else ""
        )
        raise FileNotFoundError(
            f"run(s) {', '.join(missing)} not in {objstore.display(root)} (known runs: {known}){hint}"
        )
    return snap


def parquet_files(logs: str | os.PathLike[str], runs: list[str] | None = None) -> list[Path]:
    """Committed data files of the store (or of the named runs), as their manifests list them.

    Takes no lock beyond the listing: read through ``snapshot`` where a concurrent replace of
    the run could remove the files before they are read."""
    with snapshot(logs, runs) as snap:
        return snap.all_files()
