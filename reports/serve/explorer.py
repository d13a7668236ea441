"""The explorer's state: a locked-down DuckDB database over the store, one cursor per request.

Each build is a database of its own whose views and ``explorer`` table are database-wide, so a
request reads it through a cursor of its own (``connection``): requests run side by side and a
slow SQL box query stalls only itself (before, one locked connection made every page wait for
it). The store's fingerprint (each run's manifest and Parquet files with their sizes and times)
is checked at most every ``recheck_s`` seconds; when an ingest has changed it, a new build is
made while requests go on reading the old one, which closes once its last cursor is done.

Each build spills into a private temp folder (removed with it) and holds at most
``cfg.memory_limit()`` bytes, its table and every query together.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ddai.pipelines import store
from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import objstore, query
from ddai.reports.serve import queries, sqlbox
from ddai.reports.serve.config import ServeConfig
from ddai.reports.serve.live import run_versions, store_version


def fingerprint(logs: Path, runs: list[str] | None) -> tuple[tuple[str, str | int, int], ...]:
    """(path, size, mtime_ns) of every Parquet file and manifest the explorer reads; on object
    storage (no mtimes, objects never rewritten in place) (run, manifest version, 0) of each
    served run: every commit adds a delta to the run's manifest log, which moves its version."""
    if objstore.is_url(logs):
        return tuple((run, v, 0) for run, v in sorted(run_versions(logs, runs).items()))
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


@dataclass
class Build:
    """One database over one version of the store, and the requests reading it now."""

    con: duckdb.DuckDBPyConnection
    spill: tempfile.TemporaryDirectory[str]
    users: int = 0
    retired: bool = False

    def close(self) -> None:
        self.con.close()
        self.spill.cleanup()


class Explorer:
    """The current build, the cursors requests read it through, and when it was built."""

    def __init__(self, cfg: ServeConfig, *, recheck_s: float = 2.0) -> None:
        self.cfg = cfg
        self.recheck_s = recheck_s
        self.lock = threading.Lock()  # guards current / users / cursor(): microseconds each
        self.building = threading.Lock()  # one build at a time; requests never wait on it
        self.current: Build | None = None
        self.print: tuple[tuple[str, str | int, int], ...] = ()
        self.checked = 0.0
        self.builds = 0
        self.meta: dict[str, list[str]] = {"runs": [], "tags": []}
        self.version = ""
        """The store's version the current build read (``live.store_version``)."""
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

    def _build(self) -> Build:
        query.logs_or_fail(self.cfg.logs)
        con = query.connect(self.cfg.logs, self.cfg.runs, threads=self.cfg.threads, wide=True)
        spill = tempfile.TemporaryDirectory(prefix="ddai-serve-")
        try:
            sqlbox.spill_to(con, Path(spill.name), self.cfg.logs)
            queries.open_explorer(con, self.params(), wide=True)
            sqlbox.lock_down(con, self.cfg.logs, memory_limit=self.cfg.memory_limit())
        except Exception:
            con.close()
            spill.cleanup()
            raise
        return Build(con, spill)

    def refresh(self, *, force: bool = False, now: bool = False) -> bool:
        """Rebuild if the store changed since the last build (or ``force``); True if rebuilt.

        The store is looked at most every ``recheck_s`` seconds, or at once with ``now`` (the
        live tail's poll). A request finding another one rebuilding reads the current build (no
        wait)."""
        t = time.monotonic()
        if not (force or now) and t - self.checked < self.recheck_s:
            return False
        if not self.building.acquire(blocking=force or self.current is None):
            return False
        try:
            self.checked = t
            current = fingerprint(self.cfg.logs, self.cfg.runs)
            if not force and current == self.print and self.current is not None:
                return False
            # read before the build: a commit landing during it moves the version again, so the
            # next look rebuilds rather than keeping a version older than the data
            version = store_version(run_versions(self.cfg.logs, self.cfg.runs))
            new = self._build()
            # the filter form's choices, read once per build rather than on every page
            meta = {"runs": queries.runs(new.con), "tags": queries.tags(new.con)}
            with self.lock:
                old, self.current, self.print, self.meta = self.current, new, current, meta
                self.version = version
                self.builds += 1
                if old is not None:
                    old.retired = True
                close_old = old is not None and old.users == 0
            if close_old:
                assert old is not None
                old.close()
            return True
        finally:
            self.building.release()

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of its own on the current build, closed when the block ends; the build
        stays open until every cursor on it is done, even if a newer one replaces it."""
        self.refresh()
        with self.lock:
            build = self.current
            assert build is not None, "the explorer was closed"
            build.users += 1
            cur = build.con.cursor()
        try:
            yield cur
        finally:
            with self.lock:
                cur.close()
                build.users -= 1
                done = build.retired and build.users == 0
            if done:
                build.close()

    def close(self) -> None:
        with self.lock:
            build, self.current = self.current, None
            if build is None:
                return
            build.retired = True
            done = build.users == 0
        if done:
            build.close()
