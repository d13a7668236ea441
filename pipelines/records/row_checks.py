"""Checks across rows: rollouts of one ingest that share a key, or that repeat one already stored.

A rollout is keyed by (``step``, ``uid``, ``rollout_idx``) within its run: the same prompt's
rollout ``k`` may recur in another training step, never in the same one. When a key comes back:

- with the same content (the same source line again: a log concatenated twice, a writer that
  replayed its buffer), the repeat is quarantined as ``duplicate rollout``, so per-prompt means
  do not count one rollout twice;
- with different content (a source without steps that logged the prompt again, or a broken
  index), both are kept and the later one is flagged ``duplicate_key``: ddai cannot tell which one
  is right, so it drops neither; the flag is counted and ``ddai distill`` leaves flagged rows out.

On ``--append``, a row whose key is already committed in the run (when the ingest first routes a
row to it) is quarantined as ``duplicate of a stored rollout``, whatever its content: an append
adds rollouts and never changes committed ones (the store keeps no source text to compare
with), so ``--append`` of a file read before adds nothing twice. Its raw line stays in the
quarantine; re-ingest without ``--append`` to replace the run instead.

Keys are held as the (step, uid, rollout_idx) tuples themselves, in a dict keyed by them: Python
hashes each key in C and compares keys exactly when two hashes meet, so a hash collision never
makes two rollouts duplicates. A batch read in columns is checked with set operations on its keys
(``check_batch``): only the rows whose key meets another go through a Python call. Contents are
the reader's digests (16 bytes of a line's hash; 8, one polars row hash, for a Parquet row).
Memory grows by about 210 bytes per rollout with 36-character uids, the content digests aside
(the key tuple, its uid string, the dict entry; 16-byte key digests took about 100): about 110 MB
more at 1M rollouts, for no per-row work. The stored keys of an appended-to run take as much each.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

DUPLICATE = "duplicate rollout"
STORED = "duplicate of a stored rollout"
DUPLICATE_KEY = "duplicate_key"


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class DuplicateKeys:
    """The rollout keys (and their contents) seen so far in one ingest, per run."""

    def __init__(self, stored: Callable[[str], Iterable[tuple[Any, ...]]] | None = None) -> None:
        """``stored``: run → the (step, uid, rollout_idx) keys committed in it (``--append``)."""
        self._seen: dict[str, dict[tuple[Any, ...], bytes]] = {}
        self._stored_of = stored
        self._stored: dict[str, set[tuple[Any, ...]]] = {}

    def _stored_keys(self, run: str) -> set[tuple[Any, ...]] | None:
        """The keys committed in ``run`` (read once), or None without ``--append``."""
        if self._stored_of is None:
            return None
        if run not in self._stored:
            self._stored[run] = set(self._stored_of(run))
        return self._stored[run]

    def check(
        self, run: str, row: dict[str, Any], content: str, digest: bytes | None = None
    ) -> tuple[str, str] | None:
        """None when the row may be kept (flagged ``duplicate_key`` in place when its key was seen
        with other content); (reason, detail) when it is to be quarantined: it repeats an earlier
        row of this ingest exactly, or a rollout stored in the run. ``digest``: the content's
        digest when the reader computed one (else ``content``'s)."""
        key = (row.get("step"), row["uid"], row["rollout_idx"])
        verdict = self.check_key(run, key, digest or _digest(content.rstrip("\r\n")))
        if verdict is not None and verdict[0] == DUPLICATE_KEY:
            row["flags"] = sorted({*(row["flags"] or ()), DUPLICATE_KEY})
            return None
        return verdict

    def check_key(self, run: str, key: tuple[Any, ...], content: bytes) -> tuple[str, str] | None:
        """``check`` on a key (step, uid, rollout_idx) and its row's content digest
        (``digest_bytes``): None (keep), ``(DUPLICATE_KEY, "")`` (keep, flagged) or the
        (reason, detail) to quarantine it with."""
        stored = self._stored_keys(run)
        if stored is not None and key in stored:
            step, uid, idx = key
            return STORED, (
                f"(step, uid, rollout_idx) = ({step}, {uid!r}, {idx}) is already in run "
                f"{run!r}; --append adds rollouts and keeps the stored one (re-ingest without "
                "--append to replace the run)"
            )
        seen = self._seen.setdefault(run, {})
        first = seen.get(key)
        if first is None:  # (not an identity test: two rows may share one digest object)
            seen[key] = content
            return None
        step, uid, idx = key
        if first == content:
            return DUPLICATE, (
                f"(step, uid, rollout_idx) = ({step}, {uid!r}, {idx}) read before in this ingest "
                "with the same content; the first is kept"
            )
        return DUPLICATE_KEY, ""

    def check_batch(
        self, run: str, keys: list[tuple[Any, ...]], contents: list[bytes]
    ) -> list[tuple[int, tuple[str, str]]]:
        """``check_key`` over a batch's rows (``keys[i]``, ``contents[i]``): the (row index,
        verdict) of every row not simply kept, in row order. The keys that meet another (twice in
        the batch, seen before, or stored) are found with set operations in C; only their rows go
        through ``check_key``, in order, and the others are recorded as they come."""
        seen = self._seen.setdefault(run, {})
        stored = self._stored_keys(run)
        counts = Counter(keys)
        hit = {k for k, n in counts.items() if n > 1} if len(counts) < len(keys) else set()
        hit |= seen.keys() & counts.keys()
        if stored:
            hit |= stored & counts.keys()
        if not hit:
            seen.update(zip(keys, contents, strict=True))
            return []
        out = []
        for i, (key, content) in enumerate(zip(keys, contents, strict=True)):
            if key not in hit:
                seen[key] = content
            elif (verdict := self.check_key(run, key, content)) is not None:
                out.append((i, verdict))
        return out


def digest_bytes(raw: bytes) -> bytes:
    """The content digest of a source line given as UTF-8 bytes without its line end."""
    return hashlib.blake2b(raw, digest_size=16).digest()
