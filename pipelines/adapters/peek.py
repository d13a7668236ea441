"""Cheap looks at the start of a file, for format sniffers."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters.base import _read_line, open_lines

# A first line up to this size is parsed whole (a rollout with a huge response is still a rollout);
# a longer one, a blank one or one that is not a JSON object is passed over for the next, for up
# to ``PEEK_SKIP_BYTES`` of leading lines: leading garbage (a log's banner, a crashed writer's
# fragments) does not hide the file's format, and the reader quarantines each such line.
PEEK_LINE_BYTES = 64 << 20
PEEK_SKIP_BYTES = 64 << 20


def first_object(path: Path) -> dict[str, Any] | None:
    """The first JSONL line that parses as an object (within the first ``PEEK_SKIP_BYTES`` of
    lines passed over), else None.

    Never raises; memory stays bounded by ``PEEK_LINE_BYTES``. Several sniffers ask about the
    same file in turn: the answer is remembered per (path, size, mtime), so a 50 MB first line is
    read once. Callers must not modify the object.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _first_object(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _first_object(path: str, size: int, mtime_ns: int) -> dict[str, Any] | None:
    try:
        with open_lines(path) as fh:
            while fh.tell() <= PEEK_SKIP_BYTES:
                line, size = _read_line(fh, PEEK_LINE_BYTES)
                if not size:
                    return None
                if size != len(line):  # longer than PEEK_LINE_BYTES: passed over
                    continue
                if not line.lstrip().startswith(b"{"):  # blank, or no object: passed over
                    continue
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(obj, dict):
                    return obj
    except OSError:
        return None
    return None


def head_text(path: Path, n: int = 4096) -> str:
    """The first ``n`` bytes of a file as text, past a byte-order mark (undecodable bytes
    replaced)."""
    try:
        with open_lines(path) as fh:
            return fh.read(n).decode("utf-8", errors="replace")
    except OSError:
        return ""
