"""ddai's own rollout files: JSONL (one rollout object per line) or Parquet in the log's shape.

Both read in columns where they can (``native_jsonl_columns``, ``native_columns``: batches of
rows the per-row path would keep as they are), any other batch row by row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters import native_columns, native_jsonl_columns
from ddai.pipelines.adapters.base import (
    ReaderContext,
    RowBatch,
    SourceRecord,
    contained,
    iter_json_lines,
    open_lines,
)
from ddai.pipelines.adapters.line_batches import iter_batches
from ddai.pipelines.adapters.peek import first_object
from ddai.pipelines.records.lazy import lazy_module

pq = lazy_module("pyarrow.parquet")

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
    with open_lines(path) as fh:
        if not ctx.columnar:
            yield from _records(iter_json_lines(fh, ctx))
            return
        # Whole batches in columns where the batch is clean; any other batch line by line.
        for batch in iter_batches(fh, ctx):
            try:
                got = native_jsonl_columns.to_rows(batch, ctx.run_id) if batch.clean else None
            except Exception:  # a fault of the columnar path: the per-row path contains it by row
                got = None
            if got is not None:
                yield from got
            else:
                yield from _records(batch.records())


def _records(
    parsed: Iterable[tuple[int, str | None, Any, str | None]],
) -> Iterator[SourceRecord]:
    for line, text, obj, reason in parsed:
        if reason is not None:
            key, _, detail = reason.partition("|")
            yield SourceRecord(None, line, text, key, detail)
        elif not isinstance(obj, dict):
            yield SourceRecord(None, line, text, "wrong type", "a row must be a JSON object")
        else:
            yield SourceRecord(obj, line, text, run_id=_run(obj))


def _run(obj: dict) -> str | None:
    r = obj.get("run_id")
    return r if isinstance(r, str) else None


def _read_parquet(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    pf = pq.ParquetFile(path)
    line = 0
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH):
        ctx.bytes_read += batch.nbytes
        digests = native_columns.digests(batch)
        if ctx.columnar and digests is not None:
            got = native_columns.to_rows(batch, ctx.run_id, line + 1, digests)
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
