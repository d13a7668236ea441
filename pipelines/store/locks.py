"""File locks for the log store and atomic writes (``flock``: released when the process dies).

- ``exclusive(path)``: a writer lock. When another process holds it, ``on_wait`` is told once
  (who holds it, since when) and the call blocks until the lock is free.
- ``shared(path)`` / ``try_exclusive(path)``: readers hold a shared lock on a run while they read
  one version of it; a writer removes superseded files only when ``try_exclusive`` gets the lock
  (no reader left), else leaves them for the next write.
- ``claimed_dir(path)`` / ``claimed_file(path)`` / ``is_abandoned(path)``: a temp folder or file
  being written is claimed by its process; a claim nobody holds any more is the leftover of a
  crashed write, safe to remove. The claim is taken under a private name and the folder or file
  renamed into place only then, so no cleaner ever sees it unclaimed (creating it under its own
  name and locking it after left a moment where another write's cleaning removed it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

CLAIM = ".claim"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _open(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a+", encoding="utf-8")


@contextlib.contextmanager
def exclusive(
    path: str | os.PathLike[str], what: str, on_wait: Callable[[str], None] | None = _say
) -> Iterator[None]:
    """Hold the exclusive lock ``path`` (created if missing); ``what`` names it in the message."""
    fh = _open(Path(path))
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            if on_wait is not None:
                on_wait(f"waiting for {what}: held by {holder} (lock file {path})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        fh.flush()
        yield
    finally:
        fh.close()  # closing releases the lock


class Shared:
    """A shared lock held until ``release`` (or garbage collection of the holder)."""

    def __init__(self, path: str | os.PathLike[str]):
        self._fh: IO[str] | None = _open(Path(path))
        fcntl.flock(self._fh, fcntl.LOCK_SH)

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Shared:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def try_exclusive(path: str | os.PathLike[str]) -> IO[str] | None:
    """The lock ``path`` held exclusively if nobody holds it now (close the handle to release),
    else None."""
    fh = _open(Path(path))
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


# Where a claim is taken before the claimed path appears. A kill in that moment leaves it behind:
# the next write removes it once its claim is free (``store.clean_leftovers``); a claim a cleaner
# removed in the instant before it was locked is taken again under a new name.
CLAIMING = ".claiming-"


def claimed_dir(path: str | os.PathLike[str]) -> IO[str]:
    """Create folder ``path`` (its parent must exist) already claimed by this process: the claim
    handle (close it when the write is done or abandoned). Raises FileExistsError if it exists."""
    p = Path(path)
    if p.exists():
        raise FileExistsError(f"{p} exists")
    for attempt in range(3):
        private = p.with_name(f"{CLAIMING}{uuid.uuid4().hex}")
        private.mkdir()
        try:
            fh = claim(private)
            try:
                os.rename(private, p)  # the lock belongs to the open file, which the rename keeps
            except OSError:
                fh.close()
                raise
        except (FileNotFoundError, BlockingIOError):
            # a cleaner took the unclaimed folder in that instant
            shutil.rmtree(private, ignore_errors=True)
            if attempt == 2:
                raise
            continue
        except BaseException:
            shutil.rmtree(private, ignore_errors=True)
            raise
        return fh
    raise AssertionError("unreachable")


def claimed_file(path: str | os.PathLike[str], *, binary: bool = False) -> IO[Any]:
    """Create file ``path`` for writing (text in UTF-8, or ``binary``), already claimed by this
    process: write through the returned handle, close it when done. Replaces nothing:
    FileExistsError if it exists."""
    p = Path(path)
    for attempt in range(3):
        private = p.with_name(f"{CLAIMING}{uuid.uuid4().hex}")
        fh: IO[Any] = (
            open(private, "xb")  # noqa: SIM115 - the caller closes it
            if binary
            else open(private, "x", encoding="utf-8")  # noqa: SIM115
        )
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                os.link(private, p)  # fails if ``p`` exists, unlike rename
            except (FileExistsError, FileNotFoundError):
                raise
            except OSError:  # a filesystem without hard links: the names are unique anyway
                os.rename(private, p)
            else:
                private.unlink(missing_ok=True)  # a cleaner may have taken the name meanwhile
        except (FileNotFoundError, BlockingIOError):
            # a cleaner took the unclaimed file in that instant
            fh.close()
            if attempt == 2:
                raise
            continue
        except BaseException:
            fh.close()
            private.unlink(missing_ok=True)
            raise
        return fh
    raise AssertionError("unreachable")


def claim(path: str | os.PathLike[str]) -> IO[str]:
    """Claim ``path`` (a file being written, or a folder via its ``.claim`` file) for this
    process; close the handle when the write is done or abandoned."""
    p = Path(path)
    if not p.exists():  # never created here: a cleaner took an unclaimed folder (FileNotFound)
        raise FileNotFoundError(f"{p} is gone")
    target = p / CLAIM if p.is_dir() else p
    fh = open(target, "a", encoding="utf-8")  # noqa: SIM115 - closed by the caller
    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fh


# A folder under a claiming name without its claim file may be in the instant between its mkdir
# and its claim: removed only once this much older (a file is claimed as it is opened).
CLAIMING_GRACE_S = 60.0


def is_stale_claiming(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (a ``.claiming-*`` entry) is what a killed write left: a file, or a
    folder holding its claim file, nobody holds; a folder without one once it is old. Remove it
    with ``remove_claiming``, never ``rmtree`` in place."""
    p = Path(path)
    try:
        if p.is_dir() and not (p / CLAIM).exists():
            return time.time() - p.stat().st_mtime > CLAIMING_GRACE_S
    except FileNotFoundError:
        return False
    return is_abandoned(p)


def remove_claiming(path: str | os.PathLike[str]) -> bool:
    """Remove ``path``, a ``.claiming-*`` entry a killed write left (``is_stale_claiming``);
    True when removed. A folder is first renamed to a name of its own, then removed: between
    ``claim``'s open of the claim file and its lock the folder looks abandoned, and an ``rmtree``
    in place (the claim file, then the folder) could lose the race with ``claimed_dir``'s rename,
    leaving the write's folder in place without its claim file for the next clean to remove
    under the live writer. Renamed away, the writer's own rename fails and it claims anew."""
    p = Path(path)
    if not is_stale_claiming(p):
        return False
    if not p.is_dir():
        p.unlink(missing_ok=True)
        return True
    gone = p.with_name(f"{CLAIMING}removed-{uuid.uuid4().hex}")
    try:
        os.rename(p, gone)
    except FileNotFoundError:
        return False  # its writer renamed it into place first: it holds the claim
    shutil.rmtree(gone, ignore_errors=True)
    return True


def is_abandoned(path: str | os.PathLike[str]) -> bool:
    """True when nobody holds the claim on ``path`` (its writer finished or died)."""
    p = Path(path)
    target = p / CLAIM if p.is_dir() else p
    try:
        fh = open(target, "a", encoding="utf-8")  # noqa: SIM115
    except OSError:
        return True  # a folder without a claim file is left from before claims existed
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        fh.close()
    return True
