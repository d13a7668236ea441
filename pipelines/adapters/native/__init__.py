"""ddai's own rollout files: JSONL (one rollout object per line) or Parquet in the log's shape.

The reader reads in columns: JSONL in byte batches of whole lines (``jsonl``), Parquet by record
batch (``parquet``; the next batch decoded and digested by a thread meanwhile, ``read_ahead``),
each batch checked and derived as ``normalize_rollout`` would per row. It reads row by row
(each object handed to ingest as it is, where ``normalize_rollout`` reads it) only where columns
cannot give the per-row result: the JSONL batches ``line_batches.read_lines`` reads by lines (not
clean, or every one with ``ReaderContext.columnar`` false, as every Parquet batch then), a batch
``jsonl`` or ``parquet`` declines (their docstrings list when) or whose columnar read fails, and a
Parquet batch whose row digests cannot be taken in columns.
"""

from __future__ import annotations

import contextlib
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
from ddai.pipelines.adapters.line_batches import LineBatch, read_lines
from ddai.pipelines.adapters.native import jsonl, parquet
from ddai.pipelines.adapters.peek import first_object
from ddai.pipelines.adapters.read_ahead import read_ahead
from ddai.pipelines.records.deps import pq

PARQUET_BATCH = 16_384


def sniff(path: Path) -> bool:
    if path.suffix == ".parquet":
        try:
            names = set(pq.read_schema(path).names)
        except Exception:
            return False
        return {"uid", "rollout_idx"} <= names
    obj = first_object(path)
    return obj is not None and "rollout_idx" in obj and "event_type" not in obj


def read(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    if path.suffix == ".parquet":
        yield from _read_parquet(path, ctx)
        return

    def in_columns(batch: LineBatch) -> list[RowBatch] | None:
        return jsonl.to_rows(batch, ctx.run_id)

    with open_lines(path) as fh:
        yield from read_lines(fh, ctx, in_columns, _records)


def _records(
    parsed: Iterable[tuple[int, str | None, Any, str | None]],
) -> Iterator[SourceRecord]:
    for line, text, obj, reason in parsed:
        if (bad := no_object(line, text, obj, reason)) is not None:
            yield bad
        else:
            yield SourceRecord(obj, line, text, run_id=_run(obj))


def _run(obj: dict) -> str | None:
    r = obj.get("run_id")
    return r if isinstance(r, str) else None


def _read_parquet(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    pf = pq.ParquetFile(path)
    # Decoded, framed and digested one batch ahead by one thread (pyarrow and polars release the
    # GIL), while this one checks and routes the batch before; no pyarrow pool per column: on
    # row groups of a few hundred rows, its threads cost more CPU than they save.
    batches = pf.iter_batches(batch_size=PARQUET_BATCH, use_threads=False)
    digested = (_digested(batch) for batch in batches)
    with contextlib.closing(read_ahead(digested, name=f"read {path.name}")) as ahead:
        yield from _parquet_batches(ahead, ctx)


def _digested(batch: Any) -> tuple[Any, Any, list[bytes] | None]:
    """The batch, its polars frame (None: a type polars does not take) and row digests."""
    df = parquet.frame(batch)
    return batch, df, parquet.digests(df) if df is not None else None


def _parquet_batches(
    batches: Iterator[tuple[Any, Any, list[bytes] | None]], ctx: ReaderContext
) -> Iterator[SourceRecord | RowBatch]:
    line = 0
    for batch, df, digests in batches:
        ctx.bytes_read += batch.nbytes
        if ctx.columnar and digests is not None:
            got = parquet.to_rows(batch, ctx.run_id, line + 1, digests, df)
            if got is not None:
                line += batch.num_rows
                yield from got
                continue
        try:
            objs = batch.to_pylist()
        except Exception:  # e.g. invalid UTF-8 in a string column: find the row, keep the rest
            objs = None
        for i in range(batch.num_rows):
            line += 1
            rec = contained(line, None, None, _parquet_row, batch, i, objs, line)
            rec.digest = digests[i] if digests is not None else None
            yield rec


def _parquet_row(batch, i: int, objs: list[dict] | None, line: int) -> SourceRecord:
    obj = objs[i] if objs is not None else batch.slice(i, 1).to_pylist()[0]
    if isinstance(obj.get("reward_parts"), list):  # pyarrow maps come back as pairs
        obj["reward_parts"] = dict(obj["reward_parts"])
    return SourceRecord(obj, line, None, run_id=_run(obj))
