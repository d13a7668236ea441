"""Checks across rows of one ingest: rollouts that share a key.

A rollout is keyed by (``step``, ``uid``, ``rollout_idx``) within its run: the same prompt's
rollout ``k`` may recur in another training step, never in the same one. When a key comes back:

- with the same content (the same source line again: a log concatenated twice, a writer that
  replayed its buffer), the repeat is quarantined as ``duplicate rollout``, so per-prompt means
  do not count one rollout twice;
- with different content (a source without steps that logged the prompt again, or a broken
  index), both are kept and the later one is flagged ``duplicate_key``: ddai cannot tell which one
  is right, so it drops neither; the flag is counted and ``ddai distill`` leaves flagged rows out.

Keys and contents are held as 16-byte digests, so memory grows by about 150 bytes per rollout.
Rows already in the store are not compared (``--append`` of a file read before is not caught).
"""

from __future__ import annotations

import hashlib
from typing import Any

DUPLICATE = "duplicate rollout"
DUPLICATE_KEY = "duplicate_key"


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class DuplicateKeys:
    """The rollout keys (and their contents) seen so far in one ingest, per run."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[bytes, bytes]] = {}

    def check(
        self, run: str, row: dict[str, Any], content: str, digest: bytes | None = None
    ) -> str | None:
        """None when the row may be kept (flagged ``duplicate_key`` in place when its key was seen
        with other content); the quarantine detail when it repeats an earlier row exactly.
        ``digest``: the content's digest when the reader computed it (else one of ``content``)."""
        key = (row.get("step"), row["uid"], row["rollout_idx"])
        verdict = self.check_key(run, key, digest or _digest(content.rstrip("\r\n")))
        if verdict == DUPLICATE_KEY:
            row["flags"] = sorted({*(row["flags"] or ()), DUPLICATE_KEY})
            return None
        return verdict

    def check_key(self, run: str, key: tuple[Any, str, int], content: bytes) -> str | None:
        """``check`` on a key ``(step, uid, rollout_idx)`` and the digest of the row's source
        text (``digest_bytes``): None, ``DUPLICATE_KEY`` (keep, flagged) or the detail of an exact
        repeat (quarantine)."""
        kd = _digest(repr(key))
        seen = self._seen.setdefault(run, {})
        first = seen.setdefault(kd, content)
        if first is content:
            return None
        step, uid, idx = key
        if first == content:
            return (
                f"(step, uid, rollout_idx) = ({step}, {uid!r}, {idx}) read before in this ingest "
                "with the same content; the first is kept"
            )
        return DUPLICATE_KEY


def digest_bytes(raw: bytes) -> bytes:
    """The content digest of a source line given as UTF-8 bytes without its line end."""
    return hashlib.blake2b(raw, digest_size=16).digest()
