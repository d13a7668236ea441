"""JSONL in byte batches of whole lines, for readers that parse in columns.

``iter_batches`` cuts a file into ``LineBatch``es of about ``BATCH_BYTES``. A batch is *clean*
when a columnar JSON reader (Arrow's) may read it as the per-line parser would: every line ends
in a newline, none is blank, none holds a control byte (a raw tab or CR inside a string is
malformed JSON to Python), a ``\\uD800``-``\\uDFFF`` escape (maybe a lone surrogate) or invalid
UTF-8, a line with ``MAX_OPENERS`` brackets (nesting that could be too deep), nor an integer of
16 or more digits (``long_integer``: past float64's precision, which Arrow would round). Whatever the
columnar reader then still refuses (a line that is not an object, a key given twice, a value of
another type) sends the batch, and only that batch, through ``LineBatch.records``: the per-line
parser, with the same reasons and line numbers as ``iter_json_lines``. A line longer than a batch
is read alone.

What the columnar readers share lives here too: Arrow's parse of a batch (``read_json``), a
table in the log's schema (``rollout_table``), a ``RowBatch`` of a batch's lines
(``LineBatch.row_batch``), JSON text from fragments (``json_object``), the columns derived from
the turns (``from_turns``), the range check of the bounded scores (``scores_in_range``), a DuckDB
connection per thread (``duck``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar

from ddai.pipelines.adapters import base
from ddai.pipelines.adapters.base import (
    SURROGATE_ESCAPE,
    ReaderContext,
    RowBatch,
    _read_line,
    iter_json_lines,
    parse_line,
)
from ddai.pipelines.records.deps import duckdb, np, pa, pj, pl
from ddai.pipelines.records.row_checks import digest_bytes
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA, SCORE_RANGES

T = TypeVar("T")
ParsedLine = tuple[int, str | None, Any, str | None]  # (line_no, text, obj, reason)

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
    # ``ends`` once computed (by ``iter_batches`` or the first call)
    newlines: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def ends(self) -> np.ndarray:
        """Offsets of each line's newline in ``data`` (clean batches only)."""
        if self.newlines is None:
            self.newlines = _newlines(np.frombuffer(self.data, np.uint8))
        return self.newlines

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

    def row_batch(self, table: pa.Table, run_id: str) -> RowBatch:
        """``table`` (one row per line, in order) as the ``RowBatch`` of run ``run_id``: each
        row's line number, the digest of its line and its line as the per-row path keeps it."""
        raws = self.raws()
        return RowBatch(
            table,
            run_id,
            list(range(self.first_line, self.first_line + len(raws))),
            [digest_bytes(r) for r in raws],
            lambda i: (raws[i] + b"\n").decode("utf-8"),
        )

    def records(
        self, ctx: ReaderContext | None = None
    ) -> Iterator[tuple[int, str | None, Any, str | None]]:
        """The per-line path: ``(line_no, text, obj, reason)`` as ``iter_json_lines`` yields,
        blank lines skipped and counted in ``ctx.blank_lines`` (a reader passes its context)."""
        if self.size is not None:
            out = parse_line(self.first_line, self.data, self.size, self.start)
            if out is not None:
                yield out
            elif ctx is not None:
                ctx.blank_lines += 1
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
            elif ctx is not None:
                ctx.blank_lines += 1


_READ = pj.ReadOptions(block_size=2 << 20)
_local = threading.local()


def duck() -> duckdb.DuckDBPyConnection:
    """This thread's in-memory DuckDB connection, for the JSON work of the columnar readers (one
    costs about 16 ms to open: one per batch was 5% of an ingest). Unregister what you register."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = duckdb.connect()
        con.execute("SET enable_progress_bar = false")  # no bar drawn over the command's
    return con


def read_json(data: bytes, parse: pj.ParseOptions, lines: int) -> pa.Table | None:
    """``data`` (``lines`` whole JSON lines) parsed by Arrow's JSON reader, or None when it
    refuses them or reads another number of rows (e.g. two objects on one line): the per-row path
    then says why, row by row."""
    try:
        parsed = pj.read_json(pa.py_buffer(data), read_options=_READ, parse_options=parse)
    except (pa.ArrowException, ValueError):
        return None
    return parsed if parsed.num_rows == lines else None


def rollout_table(cols: dict[str, Any], n: int) -> pa.Table:
    """``n`` rows in ``ROLLOUT_SCHEMA``: each column of ``cols`` cast to its type, the others
    null."""
    return pa.table(
        [
            cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type)
            for f in ROLLOUT_SCHEMA
        ],
        schema=ROLLOUT_SCHEMA,
    )


def json_object(parts: list[pl.Expr]) -> pl.Expr:
    """A JSON object's text from its ``"key":value`` fragments (null ones left out)."""
    return pl.concat_str(
        [pl.lit("{"), pl.concat_str(parts, separator=",", ignore_nulls=True), pl.lit("}")]
    )


def scores_in_range() -> list[pl.Expr]:
    """Per bounded score (``schema.SCORE_RANGES``; its column named as in the log): whether every
    value of the frame is null or in range, one boolean each (named ``<column>_in_range``, so a
    ``select`` may hold them beside other checks of the column). A batch where one is false goes
    by rows, where ``normalize_rollout`` quarantines the row as ``score out of range``."""
    return [
        (pl.col(c).is_null() | pl.col(c).is_between(lo, hi)).all().alias(f"{c}_in_range")
        for c, (lo, hi) in SCORE_RANGES.items()
    ]


def from_turns(turns: pl.Expr) -> dict[str, pl.Expr]:
    """``num_turns``, ``terminated`` and ``format_ok`` from a ``list<TURN_TYPE>`` column, as
    ``normalize_rollout`` derives them (``tags.terminated_from`` without ``max_turns``); null
    where ``turns`` is."""
    has, n = turns.is_not_null(), turns.list.len()
    last = turns.list.last().struct
    done = last.field("action") == "search_complete"
    forced = pl.when(last.field("forced")).then(pl.lit("max_turns")).otherwise(pl.lit("complete"))
    valid = turns.list.eval(pl.element().struct.field("action") != "invalid").list.all()
    return {
        "num_turns": pl.when(has).then(n.cast(pl.Int32)),
        "terminated": pl.when(has & done).then(forced).when(has).then(pl.lit("invalid")),
        "format_ok": pl.when(has & (n > 0)).then(valid & done),
    }


def _newlines(arr: np.ndarray) -> np.ndarray:
    return np.flatnonzero(arr == 10)


def newlines(data: bytes) -> np.ndarray:
    """Offsets of the newlines in ``data``."""
    return _newlines(np.frombuffer(data, np.uint8))


def _is_clean(data: bytes, ends: np.ndarray) -> bool:
    """Whether ``data`` (whole lines; ``ends`` its newline offsets) is a clean batch. Each test is
    one vectorized pass over the bytes (a ``b"\\n\\n" in data`` search alone costs more than all
    of them on newline-dense text)."""
    if not len(ends) or ends[-1] != len(data) - 1 or ends[0] == 0:
        return False
    if (np.diff(ends) == 1).any():  # a blank line
        return False
    arr = np.frombuffer(data, np.uint8)
    if np.count_nonzero(arr < 32) != len(ends):  # a control byte other than newlines
        return False
    if SURROGATE_ESCAPE.search(data):
        return False
    if long_integer(arr):
        return False
    # ``[`` and ``{`` are the bytes b with b | 32 == 123; counted per line only when it may matter
    openers = np.flatnonzero((arr | 32) == 123)
    if len(openers) >= MAX_OPENERS and _most_openers(openers, ends) >= MAX_OPENERS:
        return False
    # UTF-8 validity, checked by Arrow's validator (an order of magnitude faster than a decode)
    whole = pa.LargeStringArray.from_buffers(
        1, pa.py_buffer(np.array([0, len(data)], np.int64)), pa.py_buffer(data)
    )
    try:
        whole.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


_DIGITS8 = 0x0101010101010101  # eight digit-mask bytes of 1 read as one little-endian word
# the bytes a JSON number literal can follow and be followed by (48, a digit: past the window)
_BEFORE_NUMBER = np.frombuffer(b":,[-0 \t\r\n", np.uint8)
_AFTER_NUMBER = np.frombuffer(b",]}0 \t\r\n", np.uint8)


def long_integer(arr: np.ndarray) -> bool:
    """Whether the bytes ``arr`` may hold an integer literal of 16 or more digits (past 2**53 a
    float64 cannot keep it: Arrow's reader would make it the nearest double, where Python's json
    keeps it exact, and ``normalize_rollout`` flags it in a score column). Over-reports (a
    number-like run of digits inside a string), never under-reports.

    One vectorized pass: a run of 15+ digits holds an 8-byte-aligned block of digits; only those
    blocks (the long fractions of floats, mostly) are looked at, in a window of 24 bytes either
    side: the run is taken for an integer when the bytes around it are those around a number
    (``:``, ``,``, ``[``, ``-`` or a space before; ``,``, ``]``, ``}`` or a space after), so a
    float's fraction (after ``.``) or mantissa (before ``.``/``e``) is not."""
    digit = (arr - 48) < 10
    n = len(digit) // 8 * 8
    blocks = np.flatnonzero(digit[:n].view("<u8") == _DIGITS8)
    if not len(blocks):
        return False
    idx = blocks[:, None] * 8 + np.arange(-24, 32)  # (blocks, 56): the block at 24..31
    inside = (idx >= 0) & (idx < len(arr))
    wb = np.where(inside, arr[np.clip(idx, 0, len(arr) - 1)], 32)  # one gather: bytes
    wd = (wb >= 48) & (wb <= 57)
    rows = np.arange(len(blocks))
    before = ~wd[:, :24]
    start = np.where(before.any(1), 23 - before[:, ::-1].argmax(1), -1)  # last non-digit before
    after = ~wd[:, 32:]
    end = np.where(after.any(1), 32 + after.argmax(1), 56)  # first non-digit after
    pre = np.where(start >= 0, wb[rows, np.maximum(start, 0)], 48)
    post = np.where(end < 56, wb[rows, np.minimum(end, 55)], 48)
    hit = (end - start - 1 >= 16) & np.isin(pre, _BEFORE_NUMBER) & np.isin(post, _AFTER_NUMBER)
    return bool(hit.any())


def _most_openers(openers: np.ndarray, ends: np.ndarray) -> int:
    """The most ``[`` / ``{`` bytes on one line: ``openers`` their offsets, ``ends`` the lines'
    newline offsets (whole lines)."""
    per_line = np.diff(np.searchsorted(openers, ends), prepend=0)
    return int(per_line.max()) if len(per_line) else 0


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
        ends = _newlines(np.frombuffer(chunk, np.uint8))
        yield LineBatch(chunk, line_no, pos, _is_clean(chunk, ends), newlines=ends)
        line_no += len(ends)
        pos += len(chunk)


def read_lines(
    fh: BinaryIO,
    ctx: ReaderContext,
    columns: Callable[[LineBatch], Iterable[T] | None],
    rows: Callable[[Iterable[ParsedLine]], Iterable[T]],
) -> Iterator[T]:
    """A JSONL file read in columns where it can be: each clean batch that ``columns`` takes (it
    returns None to decline one), every other batch through ``rows`` over its parsed lines. A
    fault of ``columns`` declines its batch too: the per-row path contains it row by row. With
    ``ctx.columnar`` false the whole file goes through ``rows`` (``iter_json_lines``): the
    reference the columnar readers are held to (``tests/support/columnar.py``)."""
    if not ctx.columnar:
        yield from rows(iter_json_lines(fh, ctx))
        return
    for batch in iter_batches(fh, ctx):
        got = None
        if batch.clean:
            try:
                got = columns(batch)
            except Exception:
                got = None
        yield from rows(batch.records(ctx)) if got is None else got
