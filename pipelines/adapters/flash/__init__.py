"""DDAI's legacy ``flash_rm_detail.jsonl``: one line per scored rollout (``--input-format ddai-flash``).

The line is the streaming reward manager's ``rm.flash.detail`` payload plus ``timestamp`` and
``pid``; DESIGN.md's mapping applies (``local_idx`` → ``rollout_idx``, ``final_score`` →
``reward``, ``query`` → ``question`` cut at ``\\nassistant``, …) and every other field goes to
``extra``. The file names neither run nor step: without ``--run-id`` the run id is the file stem
less ``_flash_rm_detail`` (``round0_flash_rm_detail.jsonl`` → ``round0``), ``step`` stays null, and
the number of writer processes (``pid``) seen is noted, since DDAI appended runs to one file.

The reader reads byte batches of whole lines in columns (``columns``: the mapping as polars
expressions); it maps line by line (``flash_rollout``, the reference) only where columns cannot
give the per-line result: the batches ``line_batches.read_lines`` reads by lines (not clean, or
every one with ``ReaderContext.columnar`` false) and a clean batch ``columns`` declines (its
docstring lists when) or whose columnar read fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters.base import (
    ReaderContext,
    RowBatch,
    SourceRecord,
    contained,
    no_object,
    open_lines,
)
from ddai.pipelines.adapters.ddai_common import flash_rollout, run_id_from_stem
from ddai.pipelines.adapters.flash import columns
from ddai.pipelines.adapters.line_batches import LineBatch, read_lines
from ddai.pipelines.adapters.peek import first_object

NAME = "ddai-flash"
STEM_SUFFIX = "_flash_rm_detail"


def sniff(path: Path) -> bool:
    obj = first_object(path)
    return (
        obj is not None
        and "event_type" not in obj
        and "local_idx" in obj
        and ("final_score" in obj or "judge_score" in obj)
    )


def read(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    run = None if ctx.run_id else run_id_from_stem(path.stem, STEM_SUFFIX)
    pids: set = set()
    lines = 0

    def in_columns(batch: LineBatch) -> list[RowBatch] | None:
        got = columns.to_rows(batch, ctx.run_id or run)
        if got is None:
            return None
        rows, batch_pids = got
        pids.update(_pid(p) for p in batch_pids)
        return [rows]

    with open_lines(path) as fh:
        for rec in read_lines(fh, ctx, in_columns, lambda parsed: _records(parsed, run, pids)):
            lines += len(rec.lines) if isinstance(rec, RowBatch) else 1
            yield rec
    ctx.notes[str(path)] = {"lines": lines, "writer processes (pid)": len(pids - {None})}


def _pid(pid: Any) -> Any:
    """A hashable key of one line's ``pid``; None (no pid) stays None, so it counts no writer."""
    return pid if pid is None or isinstance(pid, int | str) else repr(pid)


def _records(
    parsed: Iterable[tuple[int, str | None, Any, str | None]], run: str | None, pids: set
) -> Iterator[SourceRecord]:
    for line, text, obj, reason in parsed:
        if (bad := no_object(line, text, obj, reason, run)) is not None:
            yield bad
        else:
            pids.add(_pid(obj.get("pid")))
            yield contained(line, text, run, _record, obj, line, text, run)


def _record(obj: dict, line: int, text: str | None, run: str | None) -> SourceRecord:
    rec = flash_rollout(obj)
    if run is not None:
        rec["run_id"] = run
    return SourceRecord(rec, line, text, run_id=run)
