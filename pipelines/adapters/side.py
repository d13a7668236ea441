"""Side tables: source events that are not rollouts, streamed to ``_side/<table>/<run>.jsonl``.

Readers add rows with ``ctx.side_tables.setdefault(name, []).append(row)`` (or ``keep_line``: a
source line kept as it was logged, with no parse and re-encode); during an ingest that mapping is
a ``SideTables`` spool, so a log with millions of side events never holds them in memory. Rows go to a claimed temp file per (table, run) (a killed ingest's spools are cleaned by
the next write to the store); ``commit_run`` moves one run's tables in atomically, replacing the
run's earlier rows (or adding to them with ``append``), like partitions. The ingest calls it under
the run's write lock, before the partition manifest (the commit point), and records each table's
rows and sha256 there, so ``ddai lineage --check`` sees a side table that does not belong to the
committed ingest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ddai.pipelines.store import SIDE_DIR, check_run_id, io, locks

if TYPE_CHECKING:
    from ddai.pipelines.store.rollback import Journal

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class _Spool:
    """One side table: rows routed to a temp JSONL file per run."""

    def __init__(self, owner: SideTables, name: str):
        self.owner, self.name = owner, name
        self.files: dict[str, tuple[Path, IO[str]]] = {}
        self.counts: dict[str, int] = {}

    def append(self, row: dict[str, Any]) -> None:
        self.append_line(row.get("run_id"), json.dumps(row, ensure_ascii=False, default=str))

    def append_line(self, source_run: Any, line: str) -> None:
        """A row given as its JSON text (one line, no newline); ``source_run`` its ``run_id``."""
        run = self.owner.run_for(source_run)
        if run not in self.files:
            tmp = self.owner.root / self.name / f".tmp-{run}-{uuid.uuid4().hex[:8]}.jsonl"
            tmp.parent.mkdir(parents=True, exist_ok=True)
            # claimed as it appears: the next write removes it only if we die
            fh = locks.claimed_file(tmp)  # closed in commit/abort
            self.files[run] = (tmp, fh)
        self.files[run][1].write(line + "\n")
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

    def run_for(self, run: Any) -> str:
        """The run a row whose ``run_id`` is ``run`` goes to."""
        if self.run_id:
            return self.run_id
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

    def runs(self) -> set[str]:
        """The runs some table has rows for (a run may have side rows and no rollouts)."""
        return {run for spool in self.values() for run in spool.files}

    def commit_run(
        self, run: str, *, append: bool, journal: Journal | None = None
    ) -> dict[str, dict[str, Any]]:
        """Move ``run``'s spooled rows in (call with the run's write lock held); without
        ``append`` the run's earlier rows in tables this ingest did not write are removed too.
        Returns, per table written, ``{"rows": rows in the file, "sha256": the file's hash}``.
        ``journal``: keeps each replaced or removed file's version before, for a rollback."""
        written: dict[str, dict[str, Any]] = {}
        for name, spool in self.items():
            if run not in spool.files:
                continue
            tmp, fh = spool.files.pop(run)
            fh.flush()
            final = self.root / name / f"{run}.jsonl"
            rows = spool.counts.get(run, 0)
            join = None
            if append and final.exists():
                earlier, join = _prepend(tmp, final)
                rows += earlier
            io.crash_point(f"side:{name}:{run}")
            if journal is not None:
                journal.save(final)
            os.replace(tmp, final)
            # the claims are released only once the file is in place (the next write's cleaning
            # never takes a spool being committed for an abandoned one)
            fh.close()
            if join is not None:
                join.close()
            written[name] = {"rows": rows, "sha256": io.sha256_file(final)}
        if not append and self.root.is_dir():
            for table in self.root.iterdir():
                stale = table / f"{run}.jsonl"
                if table.name not in written and stale.exists():
                    if journal is not None:
                        journal.save(stale)
                    stale.unlink()
        return written

    def discard_run(self, run: str) -> int:
        """Drop ``run``'s spooled rows (not written); returns how many there were."""
        n = 0
        for spool in self.values():
            if run in spool.files:
                tmp, fh = spool.files.pop(run)
                fh.close()
                tmp.unlink(missing_ok=True)
                n += spool.counts.pop(run, 0)
        return n

    def abort(self) -> None:
        for spool in self.values():
            spool.close()
            for tmp, _ in spool.files.values():
                tmp.unlink(missing_ok=True)
            spool.files.clear()


def keep_line(
    tables: dict[str, Any], name: str, text: str, row: dict[str, Any] | None, source_run: Any
) -> None:
    """Add a source line to side table ``name`` as it was logged (a JSON object; ``text``
    without its line end, ``source_run`` its ``run_id``): verbatim in an ingest's spool, where
    it needs no parse and re-encode (a fifth of a columnar reader's time went there), else
    ``row`` (the line parsed, when the reader has it)."""
    if isinstance(tables, SideTables):
        # JSON's own whitespace around the object (what the parser skipped) is not kept
        tables[name].append_line(source_run, text.strip(" \t\r\n"))
    else:
        tables.setdefault(name, []).append(row if row is not None else json.loads(text))


def _prepend(tmp: Path, final: Path) -> tuple[int, IO[bytes]]:
    """Rewrite ``tmp`` as the contents of ``final`` followed by its own; returns the lines of
    ``final`` and the claim on the rewritten file (close it once the file is in place)."""
    joined = tmp.with_name(tmp.name + ".join")
    out = locks.claimed_file(joined, binary=True)  # the claim, closed by the caller
    lines = 0
    with open(final, "rb") as fh:
        for line in fh:
            out.write(line)
            lines += 1
    with open(tmp, "rb") as fh:
        shutil.copyfileobj(fh, out)
    out.flush()
    os.replace(joined, tmp)
    return lines, out


def _usable(run: str) -> bool:
    try:
        check_run_id(run)
    except ValueError:
        return False
    return True
