"""Distill as a stream: the selected rollouts become samples one batch at a time, in bounded memory.

Pass 1 (``build``) takes ``fetch.fetch_batches``'s Arrow batches as DuckDB streams them (scan
order), spills the rows DuckDB built (``sqlrows``) as they are, and per batch rebuilds each other
rollout's messages, inspects them once (``findings.inspect``), sends the kept ones' thinks to the
rewriter (none for ``--rewrite none``; the identity rewriter's answer is known without calling
it), runs the post-pass and appends one row per rollout to a local *spill* (``Spill``): its place in the selection (``_slot``), its sample key and step, the final
messages as JSON (null when dropped) and its report lines. Nothing but counts outlives a batch.

The spill is cut by selection position into buckets of consecutive slots, one Parquet file each,
so pass 2 (``write``) restores selection order one bucket at a time: it reads a bucket, sorts its
rows by slot, names each sample (``rebuild``'s rule: ``__t{step}`` where a key repeats across
steps, found over the whole spill by one DuckDB group-by) and writes the samples through a
``pyarrow.parquet.ParquetWriter`` in row groups, and every report line, to the temp paths the
caller's commit renames. Memory holds a fetch batch, then a bucket: never the selection. Every
rollout the rebuild or the post-pass dropped has a report line with its reason, so the report
accounts for every selected rollout that is not a sample.
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.distill import collector, formats, rewrite, sqlrows
from ddai.pipelines.distill.findings import Findings, inspect
from ddai.pipelines.distill.rebuild import (
    UNRENDERABLE,
    RebuildError,
    UidCollision,
    extra_of,
    rebuild,
    run_tag,
    sample_key,
)
from ddai.pipelines.distill.safety import Candidate, Event, PostPass, Sample, drop_reason
from ddai.pipelines.records.deps import pa, pc, pq

# The uid of a sample while pass 1 runs (its final uid needs every key: pass 2 puts it in).
UID_MARK = "\x00uid\x00"
_MARK_PREFIX = '{"uid": ' + json.dumps(UID_MARK) + ", "


@functools.cache
def spill_schema() -> Any:
    """The spill files' Arrow schema (built on first use: importing this module loads no pyarrow)."""
    return pa.schema(
        [
            ("_slot", pa.int64()),
            ("key", pa.string()),
            ("step", pa.int64()),
            ("built", pa.bool_()),  # the rebuild succeeded: the row takes part in uid assignment
            ("payload", pa.string()),  # the sample's final messages (formats.dumps); null: dropped
            ("events", pa.string()),  # its report lines, uid marked (built) or final (not built)
        ]
    )


# Rollouts per batch of pass 1 (their Python rows are alive one batch at a time).
FETCH_ROWS = 4_000
# Samples per Parquet row group of the output (the writer holds one group at a time).
WRITE_ROWS = 20_000
# Consecutive selection slots per spill bucket (more where a selection would need more than
# MAX_BUCKETS files): pass 2 holds one bucket's rows at a time.
BUCKET_ROWS = 20_000
MAX_BUCKETS = 256
# DuckDB's cap while it finds the keys that repeat across steps (a group-by over keys alone).
KEYS_MEMORY = "256MB"


class Spill:
    """Pass 1's rows, cut into bucket files of consecutive selection slots (``folder/b*.parquet``).

    ``n``: the selection's size. A bucket file is opened when its first row comes."""

    def __init__(self, folder: Path, n: int) -> None:
        self.folder = folder
        self.per = max(BUCKET_ROWS, -(-n // MAX_BUCKETS))
        self.writers: dict[int, pq.ParquetWriter] = {}
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        bucket = pc.divide(table["_slot"], self.per)  # integer division of non-negative slots
        for b in pc.unique(bucket).to_pylist():
            if b not in self.writers:
                self.writers[b] = pq.ParquetWriter(
                    self.path(b), spill_schema(), compression="snappy"
                )
            self.writers[b].write_table(table.filter(pc.equal(bucket, b)))
        self.rows += table.num_rows

    def path(self, b: int) -> Path:
        return self.folder / f"b{b:06d}.parquet"

    def close(self) -> None:
        for w in self.writers.values():
            w.close()

    def files(self) -> list[Path]:
        """The bucket files, in selection order."""
        return [self.path(b) for b in sorted(self.writers)]


@dataclass
class Built:
    """What pass 1 counted."""

    spilled: int = 0
    kept: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    unavailable: int = 0
    applied: rewrite.Applied | None = None
    requests: list[Any] = field(default_factory=list)  # a dry run's rewrite plan
    to_rewrite: int = 0  # a dry run: samples a rewrite would see


def _failure_event(key: str, reason: str, row: dict[str, Any]) -> Event:
    where = f"run {row.get('run_id')}, step {row.get('step')}, rollout_idx {row.get('rollout_idx')}"
    return Event(key, "drop", reason, detail=where)


def _lines(events: Iterable[Event]) -> str | None:
    text = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in events)
    return text or None


class Rewriting:
    """The rewrite of a batch's kept candidates, summed over batches."""

    def __init__(self, backend: Any, chunking: rewrite.Chunking) -> None:
        self.backend = backend
        self.chunking = chunking
        self.applied = rewrite.Applied()
        # The identity rewriter gives every think back: its answer is known without the call.
        self.identity = bool(getattr(backend, "returns_thinks_unchanged", False))
        self.skipped_requests = 0

    def __call__(self, keep: list[tuple[Candidate, Findings]]) -> None:
        if self.identity:
            self.skip([[s.text for s in f.slots if not s.forced] for _, f in keep])
            return
        a = rewrite.run(self.backend, [c for c, _ in keep], self.chunking)
        self.applied.rewritten += a.rewritten
        self.applied.unchanged += a.unchanged
        self.applied.over_budget += a.over_budget

    def skip(self, thinks: list[list[str]]) -> None:
        """The identity rewriter's requests for kept samples of these (unforced) thinks."""
        for texts in thinks:
            n = len(rewrite.chunk(texts, self.chunking))
            self.skipped_requests += n
            self.applied.unchanged += n > 0

    def close(self) -> None:
        if self.identity and self.skipped_requests:
            self.backend.account(self.skipped_requests)  # the calls it would have answered


def build(
    batches: Iterable[pa.Table],
    spill: Spill | None,
    *,
    system_prompt: str,
    post: PostPass,
    rewriting: Rewriting | None,
    advance: Callable[[int], None],
    plan_only: bool = False,
) -> Built:
    """Pass 1 over ``batches`` (``fetch_batches``'s tables with ``_slot``) into ``spill``.

    ``plan_only``: a dry run: collect the rewrite requests of the kept candidates, write nothing."""
    out = Built()
    writer = None if plan_only else spill
    with collector.tuned_for_batches():
        try:
            for part in batches:
                failed = None  # the rebuild's drops DuckDB told (``sqlrows.take``)
                if "_sql" in part.column_names:  # the rows DuckDB built go straight to the spill
                    part, failed = sqlrows.take(
                        part, writer, spill_schema(), out, post, rewriting, plan_only
                    )
                slots = part["_slot"].to_pylist()
                rows = part.drop_columns(["_slot"]).to_pylist()
                cols: dict[str, list[Any]] = {n: [] for n in spill_schema().names}
                cands: list[tuple[int, str, Candidate, Findings]] = []
                for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
                    extra = extra_of(row)
                    key = sample_key(row, run_tag(row["run_id"], extra.get("source_run_id")))
                    try:
                        if failed is not None and failed[i]:
                            raise RebuildError(UNRENDERABLE)
                        rb = rebuild(row, system_prompt, extra)
                    except RebuildError as e:
                        out.failed[e.reason] += 1
                        line = _lines([_failure_event(key, e.reason, row)])
                        _append(cols, slot, key, row, False, None, line)
                        continue
                    out.unavailable += rb.unavailable
                    c = Candidate(UID_MARK, rb.messages)
                    cands.append((i, key, c, inspect(c.messages, rb.turns)))
                if plan_only:
                    keep = [c for _, _, c, f in cands if not drop_reason(c.uid, f, post.drops)]
                    out.to_rewrite += len(keep)
                    if rewriting is not None:
                        out.requests += rewrite.plan(keep, rewriting.chunking).requests
                    advance(len(slots))
                    continue
                if rewriting is not None:
                    kept = [(c, f) for _, _, c, f in cands if not drop_reason(c.uid, f, post.drops)]
                    rewriting(kept)
                for i, key, c, f in cands:
                    sample, events = post.one(c, f)
                    payload = None if sample is None else formats.dumps(sample.messages)
                    out.kept += sample is not None
                    _append(cols, slots[i], key, rows[i], True, payload, _lines(events))
                if writer is not None and cols["_slot"]:
                    writer.add(pa.table(cols, schema=spill_schema()))
                    out.spilled += len(cols["_slot"])
                advance(len(slots))
        finally:
            if writer is not None:
                writer.close()
    if rewriting is not None:
        rewriting.close()
        out.applied = rewriting.applied
    return out


def _append(
    cols: dict[str, list[Any]],
    slot: int,
    key: str,
    row: dict[str, Any],
    built: bool,
    payload: str | None,
    events: str | None,
) -> None:
    cols["_slot"].append(slot)
    cols["key"].append(key)
    cols["step"].append(row.get("step"))
    cols["built"].append(built)
    cols["payload"].append(payload)
    cols["events"].append(events)


@dataclass(frozen=True)
class Split:
    """DDAI's train/val split (``build_train1_sft_dataset.py``): ``round(n · ratio)`` samples
    (at least 1 when there are 2 or more) drawn by Python's ``random`` seeded with ``seed``
    shuffling the sample indices; both parts keep the samples' order."""

    ratio: float
    seed: int

    def val_mask(self, n: int) -> bytearray:
        mask = bytearray(n)
        if self.ratio <= 0.0:
            return mask
        idx = list(range(n))
        random.Random(int(self.seed)).shuffle(idx)
        v = round(n * float(self.ratio))
        v = max(1, v) if n > 1 else 0
        for i in idx[:v]:
            mask[i] = 1
        return mask


@dataclass
class Written:
    rows: int = 0
    val_rows: int = 0


def write(
    spill: Spill,
    out: Path,
    report: Path,
    fmt: str,
    *,
    n_kept: int,
    val: tuple[Path, Split] | None = None,
    tmp_dir: Path,
) -> Written:
    """Pass 2: the spill in selection order into the SFT file ``out`` (and ``val``'s file), and
    every report line into ``report``."""
    files = [str(f) for f in spill.files()]
    multi = _repeated_keys(files, tmp_dir)
    mask = val[1].val_mask(n_kept) if val is not None else None
    sinks = [_Sink(out, fmt)] + ([_Sink(val[0], fmt)] if val is not None else [])
    k = 0
    with open(report, "w", encoding="utf-8") as rep:
        for f in files:
            t = pq.read_table(f)
            d = t.take(pc.sort_indices(t["_slot"])).to_pydict()
            for key, step, built, payload, events in zip(
                d["key"], d["step"], d["built"], d["payload"], d["events"], strict=True
            ):
                uid = f"{key}__t{step}" if key in multi and step is not None else key
                if events is not None:
                    rep.write(_named(events, uid) if built else events)
                if payload is not None:
                    sinks[1 if mask is not None and mask[k] else 0].add(uid, payload)
                    k += 1
    for s in sinks:
        s.close()
    return Written(sinks[0].rows, sinks[1].rows if len(sinks) > 1 else 0)


def _repeated_keys(files: list[str], tmp_dir: Path) -> set[str]:
    """The sample keys that repeat across steps (they take ``__t{step}``); raises
    ``UidCollision`` when a uid would still repeat (``rebuild``'s rule, in DuckDB over the spill's
    keys)."""
    import duckdb

    if not files:
        return set()
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        con.execute(f"SET memory_limit = '{KEYS_MEMORY}'")
        con.execute(f"SET temp_directory = '{tmp_dir}'")
        con.execute(
            """CREATE TEMP TABLE multi AS SELECT key FROM read_parquet($f) WHERE built
               GROUP BY key HAVING count(DISTINCT coalesce(CAST(step AS VARCHAR), 'null')) > 1""",
            {"f": files},
        )
        dup = con.execute(
            """SELECT uid, count(*) OVER () FROM (
                   SELECT s._slot, CASE WHEN m.key IS NOT NULL AND s.step IS NOT NULL
                       THEN s.key || '__t' || CAST(s.step AS VARCHAR) ELSE s.key END AS uid
                   FROM read_parquet($f) AS s LEFT JOIN multi AS m ON s.key = m.key
                   WHERE s.built)
               GROUP BY uid HAVING count(*) > 1 ORDER BY min(_slot) LIMIT 1""",
            {"f": files},
        ).fetchone()
        if dup is not None:
            raise UidCollision(
                f"{dup[1]} sample uid(s) repeat, e.g. {dup[0]!r}: the log holds the same rollout "
                "twice (re-ingested with --append?); re-ingest the run without --append"
            )
        return {k for (k,) in con.execute("SELECT key FROM multi").fetchall()}
    finally:
        con.close()


def _named(lines: str, uid: str) -> str:
    """Report lines written with ``UID_MARK`` as the uid, with ``uid`` instead."""
    head = '{"uid": ' + json.dumps(uid, ensure_ascii=False) + ", "
    return "".join(
        head + line[len(_MARK_PREFIX) :] if line.startswith(_MARK_PREFIX) else line
        for line in lines.splitlines(keepends=True)
    )


class _Sink:
    """One SFT file written in row groups of ``WRITE_ROWS`` samples."""

    def __init__(self, path: Path, fmt: str) -> None:
        schema = formats.TRAIN1_SCHEMA if fmt == "train1" else formats.MESSAGES_SCHEMA
        self.schema = schema.with_metadata({"ddai.format": fmt})
        self.fmt = fmt
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.uids: list[str] = []
        self.payloads: list[str] = []
        self.rows = 0

    def add(self, uid: str, payload: str) -> None:
        self.uids.append(uid)
        self.payloads.append(payload)
        if len(self.uids) >= WRITE_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.uids:
            return
        if self.fmt == "train1":
            cols = {
                "uid": self.uids,
                "format_version": [formats.FORMAT_VERSION] * len(self.uids),
                "messages": self.payloads,
            }
            table = pa.table(cols, schema=self.schema)
        else:
            samples = [
                Sample(u, json.loads(p)) for u, p in zip(self.uids, self.payloads, strict=True)
            ]
            table = formats.messages_table(samples).replace_schema_metadata(self.schema.metadata)
        self.writer.write_table(table)
        self.rows += len(self.uids)
        self.uids, self.payloads = [], []

    def close(self) -> None:
        self.flush()
        self.writer.close()
