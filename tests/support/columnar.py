"""Compare ingest's two paths: a source read in columns must give the store the per-row path gives.

``same_store`` ingests the sources twice (``columnar=True`` / ``False``) into two stores and
asserts they hold the same rollouts (every column; ``extra`` compared as parsed JSON, since the
columnar readers write numbers as polars does), the same quarantine entries line for line (line,
reason, detail, raw), the same side tables byte for byte, the same ingest summary and the same
run manifests but for what differs by time or by file bytes (the ingest id, times, part file names
and hashes). ``kinds`` lists what a reader yields in columns (``RowBatch``, or ``SourceRecord``
for lines read row by row); ``one_batch_by_rows`` checks that a JSONL reader sends the batch with
an odd line, and only that batch, through its per-row path, then compares the two paths;
``odd_line_falls_back`` writes the source for it. ``json_line`` and ``NOT_ROWS`` build each
format's lines.
Every format's tests (``tests/pipelines/adapters/``) hold its columnar reader to its per-row
reader through these. Test scaffolding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.adapters import line_batches
from ddai.pipelines.adapters.base import ReaderContext, RowBatch
from ddai.pipelines.ingest import IngestConfig, IngestResult, ingest
from ddai.pipelines.store import quarantine

# Lines of a JSONL source that hold no JSON object: every format's odd lines include them.
NOT_ROWS = ("[1, 2]", "{not json", "")
# Manifest keys that differ between two ingests of the same input.
_VOLATILE = ("written", "ingest", "wall_time_s", "sha256")


@dataclass
class Stored:
    """One ingest's outcome: its result, rollouts, quarantine entries, run manifests and side
    tables (each ``_side`` file's bytes by its path in the store)."""

    result: IngestResult
    rows: list[dict[str, Any]]
    quarantine: list[dict[str, Any]]
    manifests: dict[str, dict[str, Any]]
    side: dict[str, bytes]


def _manifest(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if k not in _VOLATILE}
    out["files"] = [f["rows"] for f in m.get("files", [])]  # names and hashes are per write
    if "quarantine" in m:  # its parts too (their lines are compared whole)
        out["quarantine"] = [p["rows"] for p in m["quarantine"]["parts"]]
    return out


def ingest_store(
    sources: Path | Iterable[Path], logs: Path, columnar: bool, sort: bool = True, **kw
) -> Stored:
    """Ingest ``sources`` into ``logs`` by one path and read back what it stored (rows sorted by
    run, step, uid and rollout_idx, or in the store's order without ``sort``)."""
    srcs = [sources] if isinstance(sources, Path) else list(sources)
    res = ingest(IngestConfig(srcs, logs, progress=False, columnar=columnar, **kw))
    rows = store.read_rollouts(logs).to_pylist() if store.list_runs(logs) else []
    for r in rows:
        r["extra"] = json.loads(r["extra"])
    if sort:
        rows.sort(key=lambda r: (r["run_id"], r["step"] or 0, r["uid"], r["rollout_idx"]))
    q = [
        {k: e[k] for k in ("line", "reason", "detail", "raw")}
        for d in sorted((logs / store.QUARANTINE_DIR).glob("[!._]*/"))
        for e in map(json.loads, quarantine.read(logs, d.name).splitlines())
    ]
    manifests = {
        run: _manifest(store.run_manifest(logs, run) or {}) for run in store.list_runs(logs)
    }
    side = {str(f.relative_to(logs)): f.read_bytes() for f in sorted(logs.glob("_side/**/*.jsonl"))}
    return Stored(res, rows, q, manifests, side)


def same_store(tmp_path: Path, sources: Path | Iterable[Path], sort: bool = True, **kw) -> Stored:
    """Both paths over ``sources`` (``IngestConfig`` options in ``kw``); asserts they agree and
    returns the columnar one."""
    srcs = [sources] if isinstance(sources, Path) else list(sources)
    a = ingest_store(srcs, tmp_path / "columns", True, sort, **kw)
    b = ingest_store(srcs, tmp_path / "rows", False, sort, **kw)
    assert a.rows == b.rows  # every column of every rollout, extra as parsed JSON
    assert a.quarantine == b.quarantine  # the same entries, line for line
    assert a.side == b.side  # the same side tables, byte for byte
    summary = [
        {k: v for k, v in x.result.summary().items() if k != "quarantine files"} for x in (a, b)
    ]
    assert summary[0] == summary[1]
    assert a.manifests == b.manifests
    assert a.result.rows_in == len(a.rows) + len(a.quarantine)  # nothing lost
    return a


def kinds(read: Callable[[Path, ReaderContext], Iterable[Any]], src: Path, **ctx) -> list[type]:
    """The types a reader yields for ``src`` in columns (``ctx``: ``ReaderContext`` fields)."""
    return [type(r) for r in read(src, ReaderContext(columnar=True, **ctx))]


def one_batch_by_rows(
    tmp_path: Path,
    read: Callable[[Path, ReaderContext], Iterable[Any]],
    src: Path,
    marker: bytes,
    sort: bool = True,
) -> Stored:
    """``src`` (JSONL) holds one odd line, found by ``marker`` in its batch (``b"\\n\\n"`` for a
    blank line): ``read`` yields every other batch as one ``RowBatch`` and that batch line by
    line; then both ingest paths agree (``same_store``, whose columnar store it returns)."""
    with open(src, "rb") as fh:
        cut = list(line_batches.iter_batches(fh, ReaderContext()))
    odd = [b for b in cut if marker in b.data]
    assert len(odd) == 1, f"{len(odd)} batches hold the marker"
    got = kinds(read, src)
    assert got.count(RowBatch) == len(cut) - 1  # the batches without the odd line: in columns
    assert len(got) - len(cut) + 1 == len(list(odd[0].records()))  # its lines: one by one
    return same_store(tmp_path, src, sort)


def odd_line_falls_back(
    tmp_path: Path,
    read: Callable[[Path, ReaderContext], Iterable[Any]],
    src: Path,
    good: list[str],
    odd: str,
    sort: bool = True,
) -> Stored:
    """``src`` written as the ``good`` lines with ``odd`` in their middle: only the batch holding
    it is read line by line (``one_batch_by_rows``), and ingest counts every line, the blank one
    too. The columnar path's ``Stored``."""
    src.parent.mkdir(parents=True, exist_ok=True)
    mid = len(good) // 2
    src.write_text("\n".join([*good[:mid], odd, *good[mid:]]) + "\n", encoding="utf-8")
    got = one_batch_by_rows(tmp_path, read, src, odd.encode() or b"\n\n", sort)
    assert got.result.rows_in == len(good) + (odd != "")
    return got


def json_line(row: dict[str, Any], **over: Any) -> str:
    """``row`` with ``over`` applied as one JSON line; a key set to ``...`` is left out."""
    row = {**row, **over}
    return json.dumps({k: v for k, v in row.items() if v is not ...}, ensure_ascii=False)
