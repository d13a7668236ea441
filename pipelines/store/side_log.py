"""A run's side table that grows while the run is written (training metrics, one row per logged
step), and the reading of every side table as one table.

Local stores append rows to ``_side/<table>/<run>.jsonl`` under the run's write lock; the run's
manifest lists the table with its row count and sha256, so ``ddai lineage --check`` sees a
changed one (``store.verify_partition``). The bytes already written are never rewritten (a
50-step run writes each row once), except when rows of a step at or after the first new step are
replaced (a resumed run), which rewrites the file atomically.

Object storage has no append, and putting the grown table whole every step writes quadratic
bytes. There each append puts only its new rows as one part object,
``_side/<table>/<run>/part-<n>-<id>.jsonl`` (a unique name: invisible until listed), and the
manifest's record of the table lists the parts in order (``parts``: name, rows, sha256; the
table's ``sha256`` is the digest over them), updated with one delta of the run's manifest log
(``manifest_log``; a conditional create). Readers
(``read_rows``, ``read_bytes``: the report's training section, the streaming analysis) read the
parts the manifest lists as one table; a table kept as one file (a local store, an ingest
before parts) is read as before. A replace (a resumed run) puts one part with the rows kept and
lists it alone; superseded parts are removed after the grace period
(``store.collect_remote_side_garbage``). A run without a manifest yet gets the table listed by
its first commit (``pending``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.store import io, manifest_log, objstore

_RETRIES = 8


def side_path(logs: str | os.PathLike[str], table: str, run_id: str) -> Path:
    """Where the table is kept as one file (local stores; object storage's parts lie beside)."""
    return Path(logs) / store.SIDE_DIR / table / f"{store.check_run_id(run_id)}.jsonl"


def part_url(url: str, table: str, name: str) -> str:
    """The URL of part ``name`` (as a manifest lists it) of side table ``table`` at ``url``."""
    return objstore.join(url, store.SIDE_DIR, table, *name.split("/"))


def put_part(url: str, table: str, run_id: str, body: bytes) -> dict[str, Any]:
    """Put ``body`` (whole JSONL lines) as a new part of ``run_id``'s table ``table`` in the
    store at ``url``; returns its manifest record (``name``, ``rows``, ``sha256``)."""
    name = (
        f"{store.check_run_id(run_id)}/part-{time.strftime('%Y%m%dT%H%M%S')}-"
        f"{uuid.uuid4().hex[:12]}.jsonl"
    )
    objstore.put_bytes(part_url(url, table, name), body)  # one PUT: never seen half written
    return {"name": name, "rows": body.count(b"\n"), "sha256": io.sha256_bytes(body)}


def listed(logs: str | os.PathLike[str], table: str, run_id: str) -> dict[str, Any] | None:
    """The run's manifest record of side table ``table`` (None when not listed)."""
    man = store.run_manifest(logs, run_id) or {}
    return (man.get("side_tables") or {}).get(table)


def side_files(logs: str | os.PathLike[str], table: str, run_id: str) -> list[Any]:
    """The files holding the table's rows, in order: the parts the manifest lists (URLs on
    object storage), else the one file. On object storage only a listed table counts (an
    unlisted object is a replaced table or a write not committed)."""
    rec = listed(logs, table, run_id)
    url = objstore.url_of(logs)
    if rec is not None and "parts" in rec:
        base = Path(logs) / store.SIDE_DIR / table
        return [part_url(url, table, p["name"]) if url else base / p["name"] for p in rec["parts"]]
    if url is not None and rec is None:
        return []
    path = side_path(logs, table, run_id)
    return [path] if objstore.any_isfile(path) else []


def read_bytes(logs: str | os.PathLike[str], table: str, run_id: str) -> bytes:
    """The table's JSONL lines as one byte string (empty when there are none)."""
    out = []
    for f in side_files(logs, table, run_id):
        url = objstore.url_of(f)
        data = objstore.read_bytes(url) if url else Path(f).read_bytes()
        if data and not data.endswith(b"\n"):
            data += b"\n"
        out.append(data)
    return b"".join(out)


def read_rows(logs: str | os.PathLike[str], table: str, run_id: str) -> list[dict[str, Any]]:
    """The table's rows (none when it is not there); a torn last line (a killed append) is left
    out."""
    rows = []
    for line in read_bytes(logs, table, run_id).decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # only the last line can be torn: nothing after it was written
    return rows


@dataclass
class SideLog:
    """Appends rows to one run's side table ``table``; ``rows`` mirrors what is stored."""

    logs: str | os.PathLike[str]
    run_id: str
    table: str
    rows: list[dict[str, Any]]
    pending: dict[str, Any] | None = None
    """The table's manifest record when the run had no manifest to list it in yet."""
    parts: list[dict[str, Any]] = field(default_factory=list)
    """Object storage: the table's parts as this log last listed them."""

    @classmethod
    def open(cls, logs: str | os.PathLike[str], run_id: str, table: str) -> SideLog:
        rec = listed(logs, table, run_id) if objstore.is_url(logs) else None
        parts = store.side_parts(rec, run_id) if rec else []
        return cls(logs, run_id, table, read_rows(logs, table, run_id), parts=parts)

    def append(self, row: dict[str, Any], *, keep: list[dict[str, Any]] | None = None) -> None:
        """Append ``row``; ``keep``: the stored rows that stay, when some give way first (a
        resumed run replacing its later steps: the table is then rewritten once)."""
        with store.run_lock(self.logs, self.run_id):  # object storage: conditional puts
            self._append_held(row, keep)

    def _append_held(self, row: dict[str, Any], keep: list[dict[str, Any]] | None) -> None:
        """``append`` with the run's write lock held."""
        line = json.dumps(row) + "\n"
        url = objstore.url_of(self.logs)
        if url is not None:  # only the new rows go up, as one new part
            lines = "".join(json.dumps(r) + "\n" for r in keep or ()) + line
            part = put_part(url, self.table, self.run_id, lines.encode("utf-8"))
            self.parts = [part] if keep is not None else [*self.parts, part]
            rec = store.side_parts_record(self.parts)
        else:
            path = side_path(self.logs, self.table, self.run_id)
            if keep is None:
                self._append_bytes(path, line)
            else:
                io.write_text(path, "".join(json.dumps(r) + "\n" for r in keep) + line)
            before = self.rows if keep is None else keep
            rec = {"rows": len(before) + 1, "sha256": io.sha256_file(path)}
        self.rows = [*(self.rows if keep is None else keep), row]
        self._list(rec, collect=keep is not None)

    def _append_bytes(self, path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and self.rows:
            _cut_torn_tail(path)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _list(self, rec: dict[str, Any], *, collect: bool = False) -> None:
        """List the table's new record in the run's manifest (or keep it ``pending``);
        ``collect``: parts were replaced, remove the superseded ones past the grace period."""
        part = store.partition_dir(self.logs, self.run_id)
        url = objstore.url_of(part)
        for _ in range(_RETRIES):
            state = manifest_log.read_state(part)
            if state.manifest is None:
                self.pending = rec
                return
            man = state.manifest
            man = {**man, "side_tables": {**(man.get("side_tables") or {}), self.table: rec}}
            try:  # one small delta in the run's manifest log (a conditional create remotely)
                manifest_log.commit(part, man, state)
            except objstore.ConflictError:
                continue  # a rollout commit came first: list the table over its version
            self.pending = None
            if collect and url is not None:
                root = objstore.url_of(self.logs)
                assert root is not None
                store.collect_remote_side_garbage(root, self.run_id, man["side_tables"])
            return
        raise store.StoreConflict(
            f"run {self.run_id!r} at {objstore.display(self.logs)}: {_RETRIES} concurrent commits in a row beat the "
            f"listing of side table {self.table}; run the command again"
        )


def append_row(
    logs: str | os.PathLike[str], run_id: str, table: str, row: dict[str, Any]
) -> SideLog:
    """Append ``row`` to ``run_id``'s table ``table`` as stored now: the table is read under the
    same hold of the run's write lock as the append, so writers in other processes (each with
    its own stale ``SideLog``) never list a wrong row count."""
    with store.run_lock(logs, run_id):
        log = SideLog.open(logs, run_id, table)
        log._append_held(row, None)
    return log


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (an append killed midway) before appending."""
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)
