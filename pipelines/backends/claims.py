"""Cross-process claims on the calls in flight: two runs on one call cache pay for a key once.

The cache stores only answers that have arrived, so a second process (a run started twice by
mistake, ``distill`` and ``distill vet`` sharing a cache) cannot see a call the first has in
flight. Before paying for a key, the engine claims it: an open-file-description lock
(``F_OFD_SETLK``) on one byte of a side file, ``<cache>.claims``, at an offset taken from a hash of
the key (60 bits: two keys share a byte with odds of about 1e-18). The file stays empty: locks past
its end are allowed and cost no disk.

Why these locks: the kernel drops them with the process (a killed run blocks nobody, no lease to
expire); an OFD lock belongs to this object's own open of the file, so closing another descriptor
of the file elsewhere in the process does not release it (it would, for classic POSIX locks), and
two caches opened on one file in one process conflict like two processes do. Within one
``Claims`` (one cache object) a second claim of a held key succeeds and is counted, the lock let go
with the last release: the engine already merges repeats of a key inside a batch, and two batches
of one process asking for one key at once behave as they did before claims.

A process forked with the cache open would share the description (and its locks) with its parent:
the first claim after a fork opens the file afresh.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from random import Random

# struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (int) + padding.
_FLOCK = "hhqqi4x"
_BUSY = (errno.EAGAIN, errno.EACCES)
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
# Polling the cache for a key another process holds: first pause, growth, longest pause (s).
_WAIT_FIRST_S = 0.05
_WAIT_GROWTH = 1.5
_WAIT_MAX_S = 1.0
HELD = object()
"""``claim_or_answer``'s answer when another process holds the key and the caller does not wait."""


def claim_offset(key: str) -> int:
    """The byte a key's claim locks: 60 bits of a hash of the key (any string; cache keys are
    sha256 hex already, a hash again costs a microsecond and takes every key the same way)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 4


class Claims:
    """Advisory per-key locks on ``path``; ``try_claim`` never blocks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # key -> claims of it this object holds
        self.disabled: str | None = None  # why claims are off (the file system refuses locks)

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._pid = os.getpid()
        return self._fd

    def _forget_if_forked(self) -> None:
        """After a fork the inherited descriptor and claims are the parent's: drop them (the
        parent's claims stay the parent's); the next claim opens the file afresh."""
        if self._fd is not None and self._pid != os.getpid():
            os.close(self._fd)  # our copy only: the parent's open of the file keeps its locks
            self._fd = None
            self._held.clear()

    def _fcntl(self, kind: int, key: str) -> bool:
        """One lock call on ``key``'s byte (under ``self._lock``): True when it took effect, False when another holder
        has it; claims turn off (with one warning) where the file system cannot lock."""
        # Not Linux: classic POSIX locks (released by any close of the file in the process).
        op = fcntl.F_SETLK if _OFD_SETLK is None else _OFD_SETLK
        request = struct.pack(_FLOCK, kind, os.SEEK_SET, claim_offset(key), 1, 0)
        if self.disabled is not None:
            return True
        try:
            fcntl.fcntl(self._file(), op, request)
        except OSError as e:
            if e.errno in _BUSY:
                return False
            self.disabled = f"{self.path}: {e}"
            warnings.warn(
                f"call cache claims are off ({self.disabled}): two runs sharing this cache "
                "may each pay for a call the other has in flight",
                RuntimeWarning,
                stacklevel=4,
            )
        return True

    def try_claim(self, key: str) -> bool:
        """Claim ``key``: True when this object now holds it (or claims are off), False when
        another process (or another cache object on the file) holds it."""
        with self._lock:
            self._forget_if_forked()
            if self._held.get(key):
                self._held[key] += 1
                return True
            if not self._fcntl(fcntl.F_WRLCK, key):
                return False
            self._held[key] = 1
            return True

    def release(self, key: str) -> None:
        """Release one claim of ``key``; the lock goes with the last (a key not held: no-op)."""
        with self._lock:
            self._forget_if_forked()
            count = self._held.get(key, 0)
            if count > 1:
                self._held[key] = count - 1
                return
            if count == 1:
                del self._held[key]
                self._fcntl(fcntl.F_UNLCK, key)

    def close(self) -> None:
        """Close the file: every claim this object holds is released."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None
            self._held.clear()


async def claim_or_answer(
    claims: Claims,
    key: str,
    answered: Callable[[str], Any],
    *,
    wait: bool,
    rng: Random,
) -> Any:
    """Claim ``key`` before paying for it. None: this process holds it and must pay (then let it
    go after the commit); ``answered(key)`` when not None: the cache has the answer (another
    process paid); ``HELD``: another process holds it and ``wait`` is off. Waiting polls
    ``answered`` with a growing, jittered pause (never a busy loop) until the answer lands or the
    claim is let go (its holder gave up, failed, or died)."""
    import asyncio

    pause = _WAIT_FIRST_S
    while True:
        if claims.try_claim(key):
            found = answered(key)  # paid and committed before we got the claim?
            if found is not None:
                claims.release(key)  # nothing of ours to commit first
            return found
        if not wait:
            return HELD
        await asyncio.sleep(pause * (0.5 + rng.random()))
        pause = min(pause * _WAIT_GROWTH, _WAIT_MAX_S)
        found = answered(key)
        if found is not None:
            return found
