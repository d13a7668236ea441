"""What a source reader yields: good records or bad lines with a reason, never an exception."""

from __future__ import annotations

import json
from collections.abc import Iterator
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


@dataclass
class ReaderContext:
    """Per-ingest settings and side outputs shared with readers."""

    run_id: str | None = None
    side_tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    run_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    bytes_read: int = 0
    # verl dumps: maps a line to its dataset id (``verl_ids.UidMapper``); None keeps the sha1 uid
    uid_mapper: Any = None


def iter_json_lines(
    fh: BinaryIO, ctx: ReaderContext
) -> Iterator[tuple[int, str | None, Any, str | None]]:
    """Stream a JSONL file: yields ``(line_no, text, obj, reason)``; ``reason`` set for bad lines.

    Reasons: ``non-UTF-8 bytes``, ``malformed JSON``, ``truncated last line`` (the final line
    has no newline and does not parse: a writer killed mid-line). Blank lines are skipped.
    """
    line_no = 0
    for raw in fh:
        line_no += 1
        ctx.bytes_read += len(raw)
        if not raw.strip():
            continue
        last_unterminated = not raw.endswith(b"\n")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield line_no, raw.decode("utf-8", errors="replace"), None, f"non-UTF-8 bytes|{e}"
            continue
        try:
            obj = json.loads(text)
        except ValueError as e:
            reason = "truncated last line" if last_unterminated else "malformed JSON"
            yield line_no, text, None, f"{reason}|{e}"
            continue
        yield line_no, text, obj, None
