"""The persistent call cache: one SQLite file, one row per answered call.

The key is a sha256 over the call's identity (backend kind, model, the endpoint's base URL
(``BackendSpec.endpoint``), role, prompt-template hash, every generation parameter and the
inputs), so any change to what would be sent, or to where, misses the cache, and a rerun or a
resumed crash pays for nothing twice. Each row records its endpoint for people (``endpoint``:
kind, URL, model).

Migration: a cache written before endpoints were keyed (no ``endpoint`` column) gets the column on
open, empty for its old rows. Those rows stay readable (``stats`` counts them as
``legacy_entries``, by kind, model and role) but are never served: their keys were computed
without an endpoint, so no lookup by a key that has one can match them, and which server answered
them is unknown (a judge pointed at a second server under the same model name must call it). A call that failed for good is stored too, in its own table
with its reason, so a rerun neither pays for it again (a malformed answer costs tokens) nor hides
it: the engine hands the cached failure back unless asked to retry failures. An answer that
arrives later replaces the failure.

Writes go through one writer thread per cache that commits whatever has queued up in one
transaction (group commit): the event loop never waits on SQLite, and sqlite releases the GIL while
it writes. An answer is committed within milliseconds of arriving, so a killed process loses about
what it had in flight; ``flush`` waits until everything queued is committed, and answers still
queued are visible to ``get_many`` meanwhile. The file is in WAL mode with a busy timeout, so
several processes can share it. A file SQLite cannot read (cut short by a full disk or a copy, or
not a database) is refused with its path and the fix (``CacheError``, a ``ConfigError``: exit 2).

Calls in flight are claimed across processes (``claims.py``, ``<cache>.claims``): the engine claims
a key before paying, ``release_claim`` lets it go once the writer has committed what the call left,
so a process waiting on the claim finds the answer in the file when it gets the claim.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.backends.claims import Claims
from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.usage import TokenUsage

CACHE_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT,
    role TEXT NOT NULL,
    value TEXT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    endpoint TEXT
)
"""
_FAILURES = """
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT,
    role TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    created REAL NOT NULL,
    endpoint TEXT
)
"""
_INSERT = (
    "INSERT OR REPLACE INTO calls (key, kind, model, role, value, input_tokens, output_tokens, "
    "created, endpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_FAILURE = (
    "INSERT OR REPLACE INTO failures (key, kind, model, role, reason, detail, created, endpoint) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_FORGET_FAILURE = "DELETE FROM failures WHERE key = ?"
# SQLite limits bound parameters per statement; look keys up in chunks below it.
_CHUNK = 500
_MAX_BATCH = 1024
# A writer with nothing to do for this long exits (and is restarted by the next put), so idle
# caches hold no thread.
_IDLE_S = 2.0
_STOP = object()
_RELEASE = None  # the "sql" of a queued claim release: done once the rows before it are committed
_OPEN: weakref.WeakSet[CallCache] = weakref.WeakSet()


def cache_key(**identity: Any) -> str:
    """sha256 of the canonical JSON of ``identity`` (sorted keys, no whitespace)."""
    blob = json.dumps(
        {"cache_version": CACHE_VERSION, **identity},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CacheError(ConfigError):
    """A cache file SQLite cannot read (cut short, or not a database); the message names it."""


@dataclass(frozen=True)
class Cached:
    value: Any
    usage: TokenUsage


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    # WAL + NORMAL: a commit survives a killed process; only an OS crash may lose the last ones.
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(_SCHEMA)
    db.execute(_FAILURES)
    _add_endpoint_column(db)
    db.commit()
    return db


def _add_endpoint_column(db: sqlite3.Connection) -> None:
    """The migration of a cache written before endpoints were keyed: add ``endpoint`` (empty for
    the old rows, which no new key can match)."""
    for table in ("calls", "failures"):
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if "endpoint" not in columns:
            try:
                db.execute(f"ALTER TABLE {table} ADD COLUMN endpoint TEXT")
            except sqlite3.OperationalError as e:  # another process added it meanwhile
                if "duplicate column" not in str(e):
                    raise


class CallCache:
    """A SQLite-backed key → answer store, safe across threads and processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._read_lock = threading.Lock()
        try:
            self._db = _connect(self.path)
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
                fix = "move it aside and rerun (the calls it answered are paid again)"
            else:  # a full disk, no permission: the file itself may be whole
                fix = "free space or fix its folder's permissions and rerun"
            raise CacheError(f"call cache {self.path} cannot be opened ({e}): {fix}") from e
        self._pending: dict[str, Cached] = {}
        self._pending_failures: dict[str, tuple[str, str]] = {}
        self._pending_lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False
        self.claims = Claims(self.path.with_name(self.path.name + ".claims"))
        _OPEN.add(self)

    # ------------------------------------------------------------------ reads
    def get_many(self, keys: Iterable[str]) -> dict[str, Cached]:
        return self._read(
            keys,
            self._pending,
            "SELECT key, value, input_tokens, output_tokens FROM calls WHERE key IN ({marks})",
            lambda value, tin, tout: Cached(json.loads(value), TokenUsage(tin, tout)),
        )

    def get(self, key: str) -> Cached | None:
        return self.get_many([key]).get(key)

    def get_failures(self, keys: Iterable[str]) -> dict[str, tuple[str, str]]:
        """Cached failures among ``keys``: key → (reason, detail)."""
        return self._read(
            keys,
            self._pending_failures,
            "SELECT key, reason, detail FROM failures WHERE key IN ({marks})",
            lambda reason, detail: (reason, detail),
        )

    def _read(
        self,
        keys: Iterable[str],
        pending: dict[str, Any],
        sql: str,
        decode: Callable[..., Any],
    ) -> dict[str, Any]:
        """``keys`` found in ``pending`` (queued, not yet written) or in the table ``sql`` reads:
        key → ``decode(*the row's other columns)``, ``_CHUNK`` keys per query."""
        wanted = list(dict.fromkeys(keys))
        with self._pending_lock:
            out = {k: pending[k] for k in wanted if k in pending}
        rest = [k for k in wanted if k not in out]
        with self._read_lock:
            for i in range(0, len(rest), _CHUNK):
                chunk = rest[i : i + _CHUNK]
                rows = self._db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk)
                for key, *columns in rows:
                    out[key] = decode(*columns)
        return out

    # ------------------------------------------------------------------ writes
    def put(
        self,
        key: str,
        value: Any,
        usage: TokenUsage,
        *,
        kind: str,
        model: str | None,
        role: str,
        endpoint: str | None = None,
    ) -> None:
        """Queue one answer for the writer thread (returns at once)."""
        self._check_writable()
        blob = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        with self._pending_lock:
            self._pending[key] = Cached(value, usage)
            self._pending_failures.pop(key, None)
        row = (
            key,
            kind,
            model,
            role,
            blob,
            usage.input_tokens,
            usage.output_tokens,
            time.time(),
            endpoint,
        )
        self._enqueue(_INSERT, row)
        self._enqueue(_FORGET_FAILURE, (key,))

    def put_failure(
        self,
        key: str,
        reason: str,
        detail: str,
        *,
        kind: str,
        model: str | None,
        role: str,
        endpoint: str | None = None,
    ) -> None:
        """Queue one failed call (its reason and detail) for the writer thread."""
        self._check_writable()
        with self._pending_lock:
            self._pending_failures[key] = (reason, detail)
        row = (key, kind, model, role, reason, detail, time.time(), endpoint)
        self._enqueue(_INSERT_FAILURE, row)

    def release_claim(self, key: str) -> None:
        """Let ``key``'s claim go once everything queued before is committed (at once when the
        writer can no longer commit: a waiting process then pays)."""
        if self._closed or self._error is not None:
            return self.claims.release(key)
        try:
            self._enqueue(_RELEASE, (key,))
        except CacheError:  # the writer failed meanwhile: nothing more will be committed
            self.claims.release(key)

    def _check_writable(self) -> None:
        if self._closed:
            raise RuntimeError(f"call cache {self.path} is closed")
        self._raise_error()

    def _raise_error(self) -> None:
        """The writer thread's SQLite error, surfaced to the callers of put and flush."""
        if self._error is not None:
            raise CacheError(
                f"call cache {self.path} cannot be written ({self._error}): free space (or fix "
                "its folder) and rerun; the answers committed before are kept, so the rerun pays "
                "only for the rest"
            )

    def _enqueue(self, sql: str | None, row: tuple[Any, ...]) -> None:
        self._raise_error()
        with self._writer_lock:
            self._queue.put((sql, row))
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name=f"ddai-cache-writer-{self.path.name}", daemon=True
                )
                self._writer.start()

    def flush(self) -> None:
        """Block until every queued answer is committed."""
        self._queue.join()
        self._raise_error()

    def _write_loop(self) -> None:
        db = _connect(self.path)
        try:
            while True:
                try:
                    item = self._queue.get(timeout=_IDLE_S)
                except queue.Empty:
                    with self._writer_lock:  # a put enqueues under this lock: none can slip by
                        if self._queue.empty():
                            self._writer = None
                            return
                    continue
                batch = [item]
                while len(batch) < _MAX_BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                rows = [b for b in batch if b is not _STOP]
                try:
                    if rows and self._error is None:
                        for sql, row in rows:  # in order: a later answer forgets a failure
                            if sql is not _RELEASE:
                                db.execute(sql, row)
                        db.commit()
                except sqlite3.Error as e:  # surfaced to put/flush callers
                    self._error = e
                finally:
                    with self._pending_lock:
                        for sql, row in rows:
                            if sql == _INSERT:
                                self._pending.pop(row[0], None)
                            elif sql == _INSERT_FAILURE:
                                self._pending_failures.pop(row[0], None)
                    for sql, row in rows:  # committed (or never to be): waiters may go on
                        if sql is _RELEASE:
                            self.claims.release(row[0])
                    for _ in batch:
                        self._queue.task_done()
                if len(rows) != len(batch):
                    return
        finally:
            db.close()

    # ------------------------------------------------------------------ stats and lifecycle
    def stats(self) -> dict[str, Any]:
        """Entries, tokens and size, in total and per (kind, model, role, endpoint); entries
        written before endpoints were keyed (never served) have endpoint None and are counted
        apart as ``legacy_entries``."""
        self.flush()
        with self._read_lock:
            rows = self._db.execute(
                "SELECT kind, model, role, endpoint, COUNT(*), SUM(input_tokens), "
                "SUM(output_tokens) FROM calls GROUP BY kind, model, role, endpoint "
                "ORDER BY kind, model, role, endpoint"
            ).fetchall()
            failures = self._db.execute("SELECT COUNT(*) FROM failures").fetchone()[0]
        # The token columns are NOT NULL, so a group's sums are never NULL.
        names = ("kind", "model", "role", "endpoint", "entries", "input_tokens", "output_tokens")
        groups = [dict(zip(names, row, strict=True)) for row in rows]
        size = sum(
            p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file()
        )
        return {
            "path": str(self.path),
            "entries": sum(g["entries"] for g in groups),
            "bytes": size,
            "groups": groups,
            "legacy_entries": sum(g["entries"] for g in groups if g["endpoint"] is None),
            "failures": failures,
        }

    def close(self) -> None:
        """Commit what is queued, stop the writer and close the file."""
        if self._closed:
            return
        self._closed = True
        with self._writer_lock:
            writer = self._writer
            if writer is not None:
                self._queue.put(_STOP)
        if writer is not None:
            writer.join()
            self._writer = None
        self.claims.close()
        with self._read_lock:
            self._db.close()

    def __enter__(self) -> CallCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    # Daemon writer threads die with the interpreter: commit what they still hold first.
    for cache in list(_OPEN):
        cache.close()
