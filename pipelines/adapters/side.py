"""Side tables: source events that are not rollouts, streamed to ``_side/<table>/<run>.jsonl``.

Readers add rows with ``ctx.side_tables.setdefault(name, []).append(row)``; during an ingest that
mapping is a ``SideTables`` spool, so a log with millions of side events never holds them in
memory. Rows go to a temp file per (table, run); ``commit`` moves them in atomically, replacing
the run's earlier rows of the ingested runs (or adding to them with ``append``), like partitions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import IO, Any

from ddai.pipelines.store import check_run_id

SIDE_DIR = "_side"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class _Spool:
    """One side table: rows routed to a temp JSONL file per run."""

    def __init__(self, owner: SideTables, name: str):
        self.owner, self.name = owner, name
        self.files: dict[str, tuple[Path, IO[str]]] = {}
        self.counts: dict[str, int] = {}

    def append(self, row: dict[str, Any]) -> None:
        run = self.owner.run_of(row)
        if run not in self.files:
            tmp = self.owner.root / self.name / f".tmp-{run}-{uuid.uuid4().hex[:8]}.jsonl"
            tmp.parent.mkdir(parents=True, exist_ok=True)
            self.files[run] = (tmp, open(tmp, "w", encoding="utf-8"))  # noqa: SIM115
        self.files[run][1].write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        self.counts[run] = self.counts.get(run, 0) + 1

    def __len__(self) -> int:
        return sum(self.counts.values())

    def close(self) -> None:
        for _, fh in self.files.values():
            fh.close()


class SideTables(dict):
    """``ReaderContext.side_tables`` for an ingest: table name → a spool with ``append``."""

    def __init__(self, logs: Path, run_id: str | None, fallback_run: str):
        super().__init__()
        self.root = Path(logs) / SIDE_DIR
        self.run_id = run_id
        self.fallback_run = fallback_run

    def run_of(self, row: dict[str, Any]) -> str:
        if self.run_id:
            return self.run_id
        run = row.get("run_id")
        return run if isinstance(run, str) and _usable(run) else self.fallback_run

    def __missing__(self, name: str) -> _Spool:
        # Table names come from the source (event types): made safe as folder names.
        safe = _UNSAFE.sub("_", str(name)).lstrip(".") or "unnamed"
        if safe not in self:
            super().__setitem__(safe, _Spool(self, safe))
        return super().__getitem__(safe)

    def setdefault(self, name: str, default: Any = None) -> _Spool:  # type: ignore[override]
        return self[name]

    def counts(self) -> dict[str, int]:
        return {name: len(s) for name, s in sorted(self.items()) if len(s)}

    def commit(self, runs: list[str], *, append: bool) -> dict[str, int]:
        """Move the spooled rows in; without ``append``, stale rows of ``runs`` are removed."""
        written: set[tuple[str, str]] = set()
        for name, spool in self.items():
            spool.close()
            for run, (tmp, _) in spool.files.items():
                final = self.root / name / f"{run}.jsonl"
                if append and final.exists():
                    _prepend(tmp, final)
                os.replace(tmp, final)
                written.add((name, run))
        if not append and self.root.is_dir():
            for table in self.root.iterdir():
                for run in runs:
                    stale = table / f"{run}.jsonl"
                    if (table.name, run) not in written and stale.exists():
                        stale.unlink()
        return self.counts()

    def abort(self) -> None:
        for spool in self.values():
            spool.close()
            for tmp, _ in spool.files.values():
                tmp.unlink(missing_ok=True)


def _prepend(tmp: Path, final: Path) -> None:
    """Rewrite ``tmp`` as the contents of ``final`` followed by its own."""
    joined = tmp.with_name(tmp.name + ".join")
    with open(joined, "wb") as out:
        for part in (final, tmp):
            with open(part, "rb") as fh:
                shutil.copyfileobj(fh, out)
    os.replace(joined, tmp)


def _usable(run: str) -> bool:
    try:
        check_run_id(run)
    except ValueError:
        return False
    return True
