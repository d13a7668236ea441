"""The explorer's state: one locked-down DuckDB connection over the store, rebuilt when it changes.

DuckDB connections are not safe to share between threads, so every use holds ``lock``. The
store's fingerprint (each run's manifest and Parquet files with their sizes and times) is checked
at most every ``recheck_s`` seconds; when an ingest has changed it, the explorer table is rebuilt
on a fresh connection, so every page reads the current store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ddai.pipelines import query, store
from ddai.reports.serve import queries, sqlbox
from ddai.reports.serve.config import ServeConfig


def fingerprint(logs: Path, runs: list[str] | None) -> tuple[tuple[str, int, int], ...]:
    """(path, size, mtime_ns) of every Parquet file and manifest the explorer reads."""
    files = list(store.parquet_files(logs, runs)) if store.list_runs(logs) else []
    # the checkpoint, and the manifest log's folder (a commit adds a file there: its mtime moves)
    files += sorted(Path(logs).glob(f"run_id=*/{store.MANIFEST}"))
    files += sorted(Path(logs).glob(f"run_id=*/{store.LOG_DIR}"))
    out = []
    for f in files:
        try:
            st = f.stat()
        except FileNotFoundError:  # replaced while we looked: the next check sees the new one
            continue
        out.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


class Explorer:
    """The connection the app's requests share, and when it was built."""

    def __init__(self, cfg: ServeConfig, *, recheck_s: float = 2.0) -> None:
        self.cfg = cfg
        self.recheck_s = recheck_s
        self.lock = threading.RLock()
        self.con: duckdb.DuckDBPyConnection | None = None
        self.print: tuple[tuple[str, int, int], ...] = ()
        self.checked = 0.0
        self.builds = 0
        self.meta: dict[str, list[str]] = {"runs": [], "tags": []}
        self.refresh(force=True)

    def params(self) -> dict[str, object]:
        c = self.cfg
        return {
            "threshold": c.success_threshold,
            "judge_high": c.judge_high,
            "ndcg_low": c.ndcg_low,
            "judge_low": c.judge_low,
            "ndcg_high": c.ndcg_high,
            "max_turns": c.max_turns,
        }

    def _build(self) -> duckdb.DuckDBPyConnection:
        query.logs_or_fail(self.cfg.logs)
        con = query.connect(self.cfg.logs, self.cfg.runs, threads=self.cfg.threads)
        try:
            queries.open_explorer(con, self.params())
            sqlbox.lock_down(con, self.cfg.logs)
        except Exception:
            con.close()
            raise
        return con

    def refresh(self, *, force: bool = False) -> bool:
        """Rebuild if the store changed since the last build (or ``force``); True if rebuilt."""
        now = time.monotonic()
        if not force and now - self.checked < self.recheck_s:
            return False
        with self.lock:
            self.checked = now
            current = fingerprint(self.cfg.logs, self.cfg.runs)
            if not force and current == self.print and self.con is not None:
                return False
            con = self._build()
            # the filter form's choices, read once per build rather than on every page
            self.meta = {"runs": queries.runs(con), "tags": queries.tags(con)}
            old, self.con, self.print = self.con, con, current
            self.builds += 1
            if old is not None:
                old.close()
            return True

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The current connection, held for this thread until the block ends."""
        self.refresh()
        with self.lock:
            assert self.con is not None
            yield self.con

    def close(self) -> None:
        with self.lock:
            if self.con is not None:
                self.con.close()
                self.con = None
