"""What a source reader yields: good records or bad lines with a reason, never an exception."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO


@dataclass
class SourceRecord:
    """One input unit: ``row`` for a rollout record, else ``reason`` (+ ``raw``) for quarantine."""

    row: dict[str, Any] | None
    line: int | None = None
    raw: str | None = None
    reason: str | None = None
    detail: str = ""
    run_id: str | None = None  # the record's run, for routing a bad line to its quarantine file
    digest: bytes | None = None  # its content digest when the reader computed one (duplicates)


@dataclass
class ReaderContext:
    """Per-ingest settings and side outputs shared with readers."""

    run_id: str | None = None
    side_tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    run_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    bytes_read: int = 0
    # blank lines skipped so far, over every source (ingest notes each source's): counted where
    # the per-line parser meets them (a columnar batch holds none: ``line_batches``)
    blank_lines: int = 0
    # verl dumps: maps a line to its dataset id (``verl.ids.UidMapper``); None keeps the sha1 uid
    uid_mapper: Any = None
    # Readers that can may yield ``RowBatch``es (whole batches of rows, already in the log's
    # schema) besides records; only ``ddai ingest`` asks for them.
    columnar: bool = False


@dataclass
class RowBatch:
    """A batch of rollout rows of one run, read in columns and already normalized.

    ``table`` is in ``ROLLOUT_SCHEMA``; per row, ``lines`` holds its source line (or row) number,
    ``digests`` the digest of its source content (``row_checks.digest_bytes``; ingest checks
    duplicates on it) and ``raw(i)`` its source text (for the quarantine entry of a repeat).
    """

    table: Any  # pyarrow.Table
    run_id: str
    lines: list[int]
    digests: list[bytes]
    raw: Callable[[int], str]


# A line longer than this is not parsed (a runaway writer, an inlined image): it is quarantined as
# ``line too long`` with its first bytes, its byte offset and length, and reading goes on.
MAX_LINE_BYTES = 256 << 20
RAW_PREFIX_BYTES = 4096
_CHUNK = 1 << 20
# A ``\uD800``-``\uDFFF`` escape: only then can a parsed line hold a lone surrogate (valid UTF-8
# bytes never decode to one), so only those lines pay for the full check.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # the same, over raw bytes
SURROGATE_DETAIL = "an unpaired \\uD800-\\uDFFF escape (e.g. half an emoji); not valid UTF-8 text"
# A key's closing quote and its colon (``":``), less those escaped inside strings (``\\":``), plus
# those of keys ending in an escaped backslash (``\\\\":``; an escaped quote after one counts
# too, harmlessly): at least the line's key occurrences. When they are no more than the keys
# parsed, no key was given twice (json keeps the last value silently). Plain ``str.count``s;
# the regex is asked only where a quote is followed by whitespace (``"key" : 1``).
_KEY_END = re.compile(r'(?<!\\)"\s*:|\\\\"\s*:')


def _key_marks(text: str) -> int:
    if '" ' in text or '"\t' in text or '"\r' in text:
        return len(_KEY_END.findall(text))
    return text.count('":') - text.count('\\":') + text.count('\\\\":')


DUPLICATE_JSON_KEY = "duplicate JSON key"


def contained(
    line: int | None,
    text: str | None,
    run_id: str | None,
    build: Callable[..., SourceRecord],
    *args: Any,
) -> SourceRecord:
    """``build(*args)``, or the row quarantined as ``unreadable row`` when building it raises.

    Readers wrap their per-row conversion in this, so one odd row never ends an ingest.
    """
    try:
        return build(*args)
    except Exception as e:  # any fault of one row stays with that row
        return SourceRecord(None, line, text, "unreadable row", error_detail(e), run_id=run_id)


def no_object(
    line: int, text: str | None, obj: Any, reason: str | None, run_id: str | None = None
) -> SourceRecord | None:
    """The quarantine unit of a parsed line (as ``iter_json_lines`` yields it) that holds no JSON
    object: its parse failure (``reason`` is ``key|detail``), or ``wrong type`` for a JSON value
    that is no object. None for an object: the reader's to read."""
    if reason is not None:
        key, _, detail = reason.partition("|")
        return SourceRecord(None, line, text, key, detail, run_id=run_id)
    if not isinstance(obj, dict):
        detail = "a line must be a JSON object"
        return SourceRecord(None, line, text, "wrong type", detail, run_id=run_id)
    return None


def error_detail(e: BaseException) -> str:
    """``Type: message``, cut short and ASCII-safe (a message may quote the bad text itself)."""
    msg = f"{type(e).__name__}: {e}"
    msg = msg if len(msg) <= 300 else msg[:300] + "…"
    return msg.encode("utf-8", "backslashreplace").decode("utf-8")


def lone_surrogate(obj: Any) -> bool:
    """True when a string in ``obj`` holds an unpaired UTF-16 surrogate (not writable as UTF-8)."""
    try:
        json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


UTF8_BOM = b"\xef\xbb\xbf"


def open_lines(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading lines, past a leading UTF-8 byte-order mark (editors on Windows
    write one; left in, it made the first line malformed JSON)."""
    fh = open(path, "rb")  # noqa: SIM115 - the caller's context manager closes it
    if fh.read(3) != UTF8_BOM:
        fh.seek(0)
    return fh


def _read_line(fh: BinaryIO, limit: int | None = None) -> tuple[bytes, int]:
    """The next line (up to ``limit`` bytes, default ``MAX_LINE_BYTES``) and its full length.

    A longer line is consumed in chunks (memory stays bounded) and only its prefix returned.
    """
    limit = MAX_LINE_BYTES if limit is None else limit
    raw = fh.readline(limit + 1)
    if len(raw) <= limit or raw.endswith(b"\n"):
        return raw, len(raw)
    size = len(raw)
    head = raw[:RAW_PREFIX_BYTES]
    while True:
        chunk = fh.readline(_CHUNK)
        size += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return head, size


def iter_json_lines(
    fh: BinaryIO, ctx: ReaderContext
) -> Iterator[tuple[int, str | None, Any, str | None]]:
    """Stream a JSONL file: yields ``(line_no, text, obj, reason)``; ``reason`` set for bad lines.

    Reasons: ``non-UTF-8 bytes``, ``malformed JSON``, ``truncated last line`` (the final line
    has no newline and does not parse: a writer killed mid-line), ``too deeply nested`` (nesting
    past the JSON parser's recursion limit), ``lone surrogate`` (a ``\\ud83d`` escape with no
    pair, e.g. a truncated emoji: not storable as UTF-8), ``line too long`` (over
    ``MAX_LINE_BYTES``; the raw text kept is the line's first bytes), ``duplicate JSON key`` (an
    object naming a key twice, at any depth: a parser keeps one value silently, so the line is
    quarantined with every value in its detail). Blank lines are skipped, counted in
    ``ctx.blank_lines``.
    """
    line_no = 0
    offset = 0
    while True:
        raw, size = _read_line(fh)
        if not size:
            return
        line_no += 1
        ctx.bytes_read += size
        start, offset = offset, offset + size
        out = parse_line(line_no, raw, size, start)
        if out is None:
            ctx.blank_lines += 1
        else:
            yield out


def parse_line(
    line_no: int, raw: bytes, size: int | None = None, start: int = 0
) -> tuple[int, str | None, Any, str | None] | None:
    """One JSONL line as ``iter_json_lines`` yields it, or None for a blank line.

    ``raw`` holds the line with its newline (a last line may lack it); ``size`` is its full length
    when ``raw`` is only the prefix of an overlong line, ``start`` its byte offset in the file.
    """
    size = len(raw) if size is None else size
    if size != len(raw):
        text = raw.decode("utf-8", errors="replace")
        detail = f"{size:,} bytes at byte offset {start} (limit {MAX_LINE_BYTES:,}); raw = first {len(raw):,} bytes"
        return line_no, text, None, f"line too long|{detail}"
    if not raw.strip():
        return None
    last_unterminated = not raw.endswith(b"\n")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return line_no, raw.decode("utf-8", errors="replace"), None, f"non-UTF-8 bytes|{e}"
    try:
        obj = json.loads(text)
    except RecursionError:
        return line_no, text, None, "too deeply nested|nesting deeper than the JSON parser allows"
    except ValueError as e:
        reason = "truncated last line" if last_unterminated else "malformed JSON"
        return line_no, text, None, f"{reason}|{e}"
    if _SURROGATE_ESCAPE.search(text) and lone_surrogate(obj):
        return line_no, text, None, f"lone surrogate|{SURROGATE_DETAIL}"
    if (twice := repeated_key(text, obj)) is not None:
        return line_no, text, None, f"{DUPLICATE_JSON_KEY}|{twice}"
    return line_no, text, obj, None


def _count_keys(obj: Any) -> int:
    """Keys of every object in ``obj``, at any depth."""
    if isinstance(obj, dict):
        return len(obj) + sum(_count_keys(v) for v in obj.values() if isinstance(v, dict | list))
    if isinstance(obj, list):
        return sum(_count_keys(v) for v in obj if isinstance(v, dict | list))
    return 0


def repeated_key(text: str, obj: Any) -> str | None:
    """For a line that parsed as ``obj``: None when no object in it names a key twice, else what
    was given twice (``"judge_score" given 2 times: 1.0, 0.123``). Python's json keeps the last
    value silently; a line whose key count shows no repeat (nearly all) costs one regex count."""
    marks = _key_marks(text)
    if marks <= (len(obj) if isinstance(obj, dict) else 0) or marks <= _count_keys(obj):
        return None
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, list[Any]] = {}
        for k, v in items:
            seen.setdefault(k, []).append(v)
        for k, vs in seen.items():
            if len(vs) > 1 and len(found) < 3:
                shown = ", ".join(json.dumps(v, ensure_ascii=False, default=str)[:80] for v in vs)
                found.append(f"{json.dumps(k, ensure_ascii=False)} given {len(vs)} times: {shown}")
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)  # parsed once already: cannot fail
    if not found:  # the extra matches were escaped quotes inside strings
        return None
    return "; ".join(found) + " (a JSON reader keeps one value silently: which is right is unknown)"
