"""JSONL in byte batches of whole lines, for readers that parse in columns.

``iter_batches`` cuts a file into ``LineBatch``es of about ``BATCH_BYTES``. A batch is *clean*
when a columnar JSON reader (Arrow's) may read it as the per-line parser would: every line ends
in a newline, none is blank, none holds a control byte (a raw tab or CR inside a string is
malformed JSON to Python), a ``\\uD800``-``\\uDFFF`` escape (maybe a lone surrogate) or invalid
UTF-8, nor a line with ``MAX_OPENERS`` brackets (nesting that could be too deep). Whatever the
columnar reader then still refuses (a line that is not an object, a key given twice, a value of
another type) sends the batch, and only that batch, through ``LineBatch.records``: the per-line
parser, with the same reasons and line numbers as ``iter_json_lines``. A line longer than a batch
is read alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from ddai.pipelines.adapters import base
from ddai.pipelines.adapters.base import (
    SURROGATE_ESCAPE,
    ReaderContext,
    _read_line,
    parse_line,
)

BATCH_BYTES = 8 << 20
# A line with this many ``[`` / ``{`` bytes may nest deeper than a columnar reader survives (Arrow's
# recurses: 100,000 levels overflow its stack) or Python's parser allows (about 1,000 levels): its
# batch is read line by line. Counting bytes over-counts (brackets inside strings), never under.
MAX_OPENERS = 200


@dataclass
class LineBatch:
    """Whole lines of a file: ``data`` from byte ``start``, the first being line ``first_line``."""

    data: bytes
    first_line: int
    start: int
    clean: bool
    size: int | None = None  # a lone overlong line: its full length (``data`` is its prefix)

    @property
    def ends(self) -> np.ndarray:
        """Offsets of each line's newline in ``data`` (clean batches only)."""
        return np.flatnonzero(np.frombuffer(self.data, np.uint8) == 10)

    def lines(self) -> pa.LargeStringArray:
        """The lines, each with its newline, as one Arrow array over ``data`` (no copy)."""
        ends = self.ends
        offsets = np.empty(len(ends) + 1, np.int64)
        offsets[0] = 0
        offsets[1:] = ends + 1
        return pa.LargeStringArray.from_buffers(
            len(ends), pa.py_buffer(offsets), pa.py_buffer(self.data)
        )

    def raws(self) -> list[bytes]:
        """Each line's bytes without its newline."""
        return self.data.split(b"\n")[:-1]

    def records(self) -> Iterator[tuple[int, str | None, Any, str | None]]:
        """The per-line path: ``(line_no, text, obj, reason)`` as ``iter_json_lines`` yields."""
        if self.size is not None:
            out = parse_line(self.first_line, self.data, self.size, self.start)
            if out is not None:
                yield out
            return
        pieces = self.data.split(b"\n")
        last = len(pieces) - 1
        for i, raw in enumerate(pieces):
            if i == last:
                if not raw:
                    return
                out = parse_line(self.first_line + i, raw)  # unterminated last line
            else:
                out = parse_line(self.first_line + i, raw + b"\n")
            if out is not None:
                yield out


def _is_clean(data: bytes) -> bool:
    if not data.endswith(b"\n") or data.startswith(b"\n") or b"\n\n" in data:
        return False
    arr = np.frombuffer(data, np.uint8)
    if np.count_nonzero(arr < 32) != data.count(b"\n"):  # a control byte other than newlines
        return False
    if SURROGATE_ESCAPE.search(data):
        return False
    if data.count(b"[") + data.count(b"{") >= MAX_OPENERS and _most_openers(arr) >= MAX_OPENERS:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _most_openers(arr: np.ndarray) -> int:
    """The most ``[`` / ``{`` bytes on one line of ``arr`` (whole lines)."""
    openers = np.flatnonzero((arr == 91) | (arr == 123))
    line_of = np.searchsorted(np.flatnonzero(arr == 10), openers)
    return int(np.bincount(line_of).max()) if len(line_of) else 0


def iter_batches(
    fh: BinaryIO, ctx: ReaderContext, batch_bytes: int | Callable[[], int] | None = None
) -> Iterator[LineBatch]:
    """Cut ``fh`` into batches of whole lines (about ``batch_bytes``, default ``BATCH_BYTES``; a
    callable is asked before each batch, for a reader whose batches grow with its state);
    ``ctx.bytes_read`` follows the bytes handed out."""
    want = batch_bytes if callable(batch_bytes) else (lambda: batch_bytes or BATCH_BYTES)
    line_no = 1
    pos = fh.tell()
    while True:
        # never more than the longest line allowed: a longer line is read alone (and quarantined)
        chunk = fh.read(min(want(), base.MAX_LINE_BYTES))
        if not chunk:
            return
        cut = chunk.rfind(b"\n")
        if cut < 0:  # one line longer than a batch, or the file's unterminated last line
            fh.seek(pos)
            raw, size = _read_line(fh)
            ctx.bytes_read += size
            yield LineBatch(raw, line_no, pos, False, size=size)
            line_no += 1
            pos += size
            continue
        if cut + 1 < len(chunk):
            chunk = chunk[: cut + 1]
            fh.seek(pos + len(chunk))
        ctx.bytes_read += len(chunk)
        yield LineBatch(chunk, line_no, pos, _is_clean(chunk))
        line_no += chunk.count(b"\n")
        pos += len(chunk)
