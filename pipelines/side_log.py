"""A run's side table that grows while the run is written (training metrics, one row per logged
step): rows are appended to ``_side/<table>/<run>.jsonl`` under the run's write lock and the
run's manifest lists the table with its row count and sha256, so ``ddai lineage --check`` sees a
changed one the way it sees a changed ingest side table (``store.verify_partition``).

Local stores append: the bytes already written are never rewritten (a 50-step run writes each row
once), except when rows of a step at or after the first new step are replaced (a resumed run),
which rewrites the file atomically. Object storage has no append: the table is put whole (a PUT is
atomic) and the manifest updated with a conditional put. A run without a manifest yet gets the
table listed by its first commit (``pending``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines import io, objstore, store

_RETRIES = 8


def side_path(logs: str | os.PathLike[str], table: str, run_id: str) -> Path:
    return Path(logs) / store.SIDE_DIR / table / f"{store.check_run_id(run_id)}.jsonl"


def read_rows(logs: str | os.PathLike[str], table: str, run_id: str) -> list[dict[str, Any]]:
    """The table's rows (none when it is not there); a torn last line (a killed append) is left
    out."""
    path = side_path(logs, table, run_id)
    if not objstore.any_isfile(path):
        return []
    rows = []
    for line in objstore.any_read_text(path).splitlines():
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

    @classmethod
    def open(cls, logs: str | os.PathLike[str], run_id: str, table: str) -> SideLog:
        return cls(logs, run_id, table, read_rows(logs, table, run_id))

    def append(self, row: dict[str, Any], *, keep: list[dict[str, Any]] | None = None) -> None:
        """Append ``row``; ``keep``: the stored rows that stay, when some give way first (a
        resumed run replacing its later steps: the file is then rewritten once, atomically)."""
        with store.run_lock(self.logs, self.run_id):  # object storage: conditional puts
            path = side_path(self.logs, self.table, self.run_id)
            line = json.dumps(row) + "\n"
            if keep is None:
                self._append_bytes(path, line)
            else:
                io.write_text(path, "".join(json.dumps(r) + "\n" for r in keep) + line)
            self.rows = [*(self.rows if keep is None else keep), row]
            self._list(path)

    def _append_bytes(self, path: Path, line: str) -> None:
        url = objstore.url_of(path)
        if url is not None:  # no append on object storage: one atomic put of the whole table
            io.write_text(path, "".join(json.dumps(r) + "\n" for r in self.rows) + line)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and self.rows:
            _cut_torn_tail(path)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _list(self, path: Path) -> None:
        """List the table's new hash in the run's manifest (or keep it ``pending``)."""
        rec = {"rows": len(self.rows), "sha256": io.sha256_file(objstore.url_of(path) or path)}
        part = store.partition_dir(self.logs, self.run_id)
        url = objstore.url_of(part)
        if url is None:
            man = store.run_manifest(self.logs, self.run_id)
            if man is None:
                self.pending = rec
                return
            man["side_tables"] = {**(man.get("side_tables") or {}), self.table: rec}
            io.write_json(part / store.MANIFEST, man)
            self.pending = None
            return
        man_url = objstore.join(url, store.MANIFEST)
        for _ in range(_RETRIES):
            tag = objstore.etag(man_url)
            if tag is None:
                self.pending = rec
                return
            man = json.loads(objstore.read_text(man_url))
            man["side_tables"] = {**(man.get("side_tables") or {}), self.table: rec}
            body = (json.dumps(man, indent=2, ensure_ascii=False, default=str) + "\n").encode()
            try:
                objstore.put_bytes(man_url, body, if_match=tag)
            except objstore.ConflictError:
                continue  # a rollout commit came first: list the table over its version
            self.pending = None
            return
        raise store.StoreConflict(
            f"run {self.run_id!r} at {url}: {_RETRIES} concurrent commits in a row beat the "
            f"listing of side table {self.table}; run the command again"
        )


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
