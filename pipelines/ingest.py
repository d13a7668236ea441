"""``ddai ingest``: read rollout sources into the log store, quarantining what cannot be read.

Invariant, per ingest and per run: rows in = rollouts out + quarantined. Sources stream through
their reader and a per-run ``PartitionWriter``, so memory stays bounded by the write batch.
For event-based sources (DDAI's unified log) a row in is a unit the reader yields: an assembled
rollout or a quarantined unit (a bad line, an incomplete rollout); the reader's event counts go to
its notes. Rollouts kept with a known defect carry ``flags`` (e.g. ``turns_incomplete``),
counted by flag in the summary and the manifest. Side tables (source events that are not rollouts) stream to
``_side/<table>/<run>.jsonl``; reader notes go to the summary and to each run's manifest.

Longer than 400 lines because reading, adapting, quarantining and committing a source are one
streaming pass with one invariant (rows in = rollouts out + quarantined).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from ddai.pipelines import adapters, store
from ddai.pipelines.adapters.base import ReaderContext, RowBatch, SourceRecord, error_detail
from ddai.pipelines.adapters.side import SideTables
from ddai.pipelines.adapters.unified.events import int_array
from ddai.pipelines.adapters.verl.ids import UidMapper
from ddai.pipelines.ingest_config import IngestConfig
from ddai.pipelines.records.deps import np, pa, pc, pq
from ddai.pipelines.records.row_checks import DUPLICATE_KEY, DuplicateKeys
from ddai.pipelines.records.schema import RowError, normalize_rollout
from ddai.pipelines.store import (
    QUARANTINE_DIR,
    PartitionWriter,
    check_run_id,
    io,
    locks,
    objstore,
    rollback,
    run_stats,
)
from ddai.pipelines.store import quarantine as quarantine_log
from ddai.pipelines.store.capabilities import Capabilities

NO_RUN = "no-run-id"


@dataclass
class RunCounts:
    rows_in: int = 0
    rollouts_out: int = 0
    quarantined: Counter = field(default_factory=Counter)
    flagged: Counter = field(default_factory=Counter)  # rollouts kept with a flag, by flag


@dataclass
class IngestResult:
    runs: dict[str, RunCounts]
    formats: dict[str, str]
    quarantine_files: list[str]
    side_tables: dict[str, int]
    notes: dict[str, Any]
    capabilities: dict[str, Capabilities] = field(default_factory=dict)
    """Per run: what its rollouts carry (the partition manifest's counts)."""
    side_not_written: dict[str, int] = field(default_factory=dict)
    """Per run: side rows left out because the run got no rollouts in this ingest (a committed
    run is kept as it was without --append; a new run would have no manifest listing them)."""
    keys_checked: dict[str, set[str]] = field(default_factory=dict)
    """Per run (``--append``): the committed files the duplicate check read (``store.stored_keys``;
    a staged object-storage ingest checks the rest in its conditional commit)."""
    already_stored: dict[str, str] = field(default_factory=dict)
    """Per run (``--append``): the committed ingest that read the same source files (a retry
    after its commit); nothing of the run was added and it is left out of the counts."""

    @property
    def rows_in(self) -> int:
        return sum(c.rows_in for c in self.runs.values())

    @property
    def rollouts_out(self) -> int:
        return sum(c.rollouts_out for c in self.runs.values())

    @property
    def quarantined(self) -> Counter:
        return sum((c.quarantined for c in self.runs.values()), Counter())

    @property
    def flagged(self) -> Counter:
        return sum((c.flagged for c in self.runs.values()), Counter())

    def summary(self) -> dict[str, Any]:
        return {
            "rows in": self.rows_in,
            "rollouts out": self.rollouts_out,
            "quarantined": sum(self.quarantined.values()),
            "quarantined by reason": dict(sorted(self.quarantined.items())),
            **({"flagged by reason": dict(sorted(self.flagged.items()))} if self.flagged else {}),
            "runs": {r: c.rollouts_out for r, c in sorted(self.runs.items())},
            "formats": self.formats,
            "quarantine files": self.quarantine_files,
            **({"side tables": self.side_tables} if self.side_tables else {}),
            **(
                {"side rows not written (their run got no rollouts)": self.side_not_written}
                if self.side_not_written
                else {}
            ),
            **({"notes": self.notes} if self.notes else {}),
            **({"already stored": self.already_stored} if self.already_stored else {}),
            # What each run can feed (distill needs turns, bucket NDCG, focus reward, ...).
            "carries": {r: c.compact() for r, c in sorted(self.capabilities.items())},
            "lacks": {r: c.lacks() for r, c in sorted(self.capabilities.items()) if c.lacks()},
        }


class _Quarantine:
    """Bad rows of one ingest, streamed to claimed spool files per run as they come (memory stays
    bounded) and written at commit as one new part per run, ``_quarantine/<run>/part-*.jsonl``,
    that the run's commit lists (``ddai.pipelines.store.quarantine``): entries accumulate across
    ingests, each tagged with its ingest id, are never overwritten, and an ingest that did not
    land leaves none that is read.

    Lines that named no run reach their run only after their source is read (``late``): they go
    to a second spool, merged back in source-and-line order at commit."""

    def __init__(self, logs: Path, ingest_id: str, sources: list[Path]):
        self.logs = logs
        self.dir = logs / QUARANTINE_DIR
        self.ingest_id = ingest_id
        self.order = {str(s): i for i, s in enumerate(sources)}
        self.spools: dict[tuple[str, bool], tuple[Path, IO[str]]] = {}
        self.late = False

    def add(self, run: str, source: Path, rec: SourceRecord, reason: str, detail: str) -> None:
        key = (run, self.late)
        if key not in self.spools:
            self.dir.mkdir(parents=True, exist_ok=True)
            kind = "late" if self.late else "rows"
            path = self.dir / f".tmp-{run}-{self.ingest_id}-{kind}.jsonl"
            # claimed as it appears: the next write cleans it only if we die
            fh = locks.claimed_file(path)  # closed in commit/abort
            self.spools[key] = (path, fh)
        entry = {
            "source": str(source),
            "line": rec.line,
            "reason": reason,
            "detail": detail,
            "raw": rec.raw if rec.raw is not None else json.dumps(rec.row, default=str),
            "ingest": self.ingest_id,
        }
        # surrogates in raw text are written escaped, never as invalid UTF-8
        self.spools[key][1].write(
            json.dumps(entry, ensure_ascii=False)
            .encode("utf-8", "backslashreplace")
            .decode("utf-8")
            + "\n"
        )

    def _key(self, text: str) -> tuple[int, int]:
        e = json.loads(text)
        return self.order.get(e["source"], len(self.order)), e["line"] or 0

    def write_part(
        self, run: str, hashes: list[str], journal: rollback.Journal | None = None
    ) -> dict[str, Any] | None:
        """Write this ingest's entries of ``run`` as a new part, not yet listed (call with the
        run's write lock held): its record for the commit to list (``name``, ``rows``,
        ``sha256``, ``ingest``, ``sources``: the source files' sha256), None when there are
        none. ``journal``: notes the part, for a rollback to remove."""
        mine = [self.spools.pop(k) for k in ((run, False), (run, True)) if k in self.spools]
        if not mine:
            return None
        for _, fh in mine:
            fh.flush()
        base = quarantine_log.run_dir(self.logs, run)
        path = base / quarantine_log.part_name()
        if journal is not None:
            journal.mkdir(base)
            journal.save(path)
        rows = 0
        with (
            io.atomic_path(path) as tmp,
            open(tmp, "w", encoding="utf-8") as out,
            contextlib.ExitStack() as stack,
        ):
            streams = [stack.enter_context(open(p, encoding="utf-8")) for p, _ in mine]
            for line in heapq.merge(*streams, key=self._key):
                out.write(line)
                rows += 1
        io.crash_point(f"quarantine:{run}")
        for spool, fh in mine:
            fh.close()
            spool.unlink(missing_ok=True)
        return {
            "name": path.name,
            "rows": rows,
            "sha256": io.sha256_file(path),
            "ingest": self.ingest_id,
            "sources": sorted(hashes),
        }

    def discard(self, run: str | None = None) -> None:
        """Drop ``run``'s entries (an ``--append`` of sources already stored adds nothing);
        without ``run``, every run's (an ingest that fails)."""
        for key in [k for k in self.spools if run is None or k[0] == run]:
            spool, fh = self.spools.pop(key)
            fh.close()
            spool.unlink(missing_ok=True)


class _Orphans:
    """Bad lines that name no run, spooled to an anonymous temp file until the source's run is
    known (a file of bad lines must not fill memory)."""

    def __init__(self) -> None:
        self.fh: IO[str] | None = None

    def add(self, rec: SourceRecord) -> None:
        if self.fh is None:
            self.fh = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        raw = rec.raw if rec.raw is not None else json.dumps(rec.row, default=str)
        self.fh.write(json.dumps([rec.line, raw, rec.reason, rec.detail]) + "\n")

    def drain(self, run_id: str | None) -> Iterator[SourceRecord]:
        if self.fh is None:
            return
        self.fh.seek(0)
        for text in self.fh:
            line, raw, reason, detail = json.loads(text)
            yield SourceRecord(None, line, raw, reason, detail, run_id=run_id)
        self.fh.close()
        self.fh = None


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]ingest[/] {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=True,
    )


def ingest(cfg: IngestConfig) -> IngestResult:
    """Ingest every source; one partition per run, replaced unless ``cfg.append``."""
    if cfg.run_id is not None:
        check_run_id(cfg.run_id)
    if objstore.is_url(cfg.logs):  # staged here, published with a conditional manifest put
        from ddai.pipelines.store import remote_store

        return remote_store.ingest(cfg, ingest)
    if any(objstore.is_url(s) for s in cfg.sources):
        raise ValueError(
            "source URLs are read when the log store is on object storage too (--logs s3://…); "
            "download them first for a local store"
        )
    folders = [str(s) for s in cfg.sources if Path(s).is_dir()]
    if folders:
        raise ValueError(
            f"{', '.join(folders)}: a directory; ingest reads files: name them "
            f"(e.g. {Path(folders[0]) / '*.jsonl'})"
        )
    missing = [str(s) for s in cfg.sources if not Path(s).is_file()]
    if missing:
        raise FileNotFoundError(f"source file(s) not found: {', '.join(missing)}")
    if cfg.stored_keys_from is None:  # a multi-run ingest killed midway: taken back first
        rollback.recover(cfg.logs, lambda run: store.run_lock(cfg.logs, run))
    fmt_of: dict[str, str] = {}
    empty = _empty_sources(cfg.sources)
    for src in cfg.sources:
        if str(src) in empty:
            fmt_of[str(src)] = EMPTY_FORMAT
            continue
        adapters.refuse_compressed(Path(src))  # with --input-format too: every line would fail
        fmt_of[str(src)] = adapters.detect(Path(src)) if cfg.fmt == "auto" else cfg.fmt
        adapters.reader(fmt_of[str(src)])  # fail early on an unknown --input-format
    side = SideTables(cfg.logs, cfg.run_id, NO_RUN)
    ctx = ReaderContext(
        run_id=cfg.run_id,
        side_tables=side,
        uid_mapper=_uid_mapper(cfg, fmt_of),
        columnar=cfg.columnar,
    )
    for src in empty:  # skipped, said in the summary's notes (never a silent nothing)
        ctx.notes[src] = EMPTY_PARQUET_NOTE if _rows_of_parquet(src) == 0 else EMPTY_NOTE
    writers: dict[str, PartitionWriter] = {}
    counts: dict[str, RunCounts] = {}
    sources_of: dict[str, list[dict[str, Any]]] = {}
    ingest_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    quarantine = _Quarantine(cfg.logs, ingest_id, list(map(Path, cfg.sources)))
    # on --append, keys already committed in a run are duplicates too (read once per run; the
    # commit checks the files committed since, under the run's lock)
    checked: dict[str, set[str]] = {}
    where = cfg.stored_keys_from or cfg.logs  # a staged object-storage ingest: the remote store
    dups = DuplicateKeys((lambda r: store.stored_keys(where, r, checked)) if cfg.append else None)
    started = time.time()
    qfiles: list[str] = []
    caps: dict[str, Capabilities] = {}
    side_dropped: dict[str, int] = {}
    committed_runs: list[str] = []
    already: dict[str, str] = {}
    try:
        with _progress(cfg.progress) as bar:
            for src in map(Path, cfg.sources):
                if str(src) in empty:
                    continue
                fmt = fmt_of[str(src)]
                size = os.path.getsize(src)
                task = bar.add_task(src.name, total=size)
                before, blank_before = ctx.bytes_read, ctx.blank_lines
                src_info = {"path": str(src), "sha256": io.sha256_file(src), "format": fmt}
                # Lines that could not even be parsed carry no run id: they are charged to the
                # run this source feeds (its first run), once the source is read.
                orphans = _Orphans()
                first_run: str | None = None
                route = _Routing(cfg, writers, counts, sources_of, src_info, quarantine, dups)
                for n, rec in enumerate(_naming_input(src, adapters.reader(fmt)(src, ctx))):
                    if isinstance(rec, RowBatch):
                        run = _route_batch(rec, src, route)
                        first_run = first_run or run
                    elif rec.reason is not None and not (cfg.run_id or rec.run_id):
                        orphans.add(rec)
                    else:
                        run = _route(rec, src, route)
                        first_run = first_run or run
                    # a redraw per row costs more than the row: per batch, or every 256 rows
                    if cfg.progress and (isinstance(rec, RowBatch) or not n % 256):
                        bar.update(task, completed=min(ctx.bytes_read - before, size))
                quarantine.late = True
                for rec in orphans.drain(first_run):
                    _route(rec, src, route)
                quarantine.late = False
                if blank := ctx.blank_lines - blank_before:  # neither rows in nor quarantined
                    ctx.notes[str(src)] = {**ctx.notes.get(str(src), {}), BLANK_NOTE: blank}
        runs = sorted(set(counts) | side.runs())
        # All or nothing: the write locks of every run (in one order: no deadlock), every run's
        # check, and only then the commits, journaled so that a late failure rolls back the
        # runs committed before it.
        with contextlib.ExitStack() as held:
            for run in runs:
                held.enter_context(store.run_lock(cfg.logs, run))
            if cfg.stored_keys_from is None:  # a killed write's leftovers, even if none commits
                store.clean_leftovers(cfg.logs)
            if cfg.append:  # an --append retried after its commit: nothing of it is added
                drop = _Dropped(writers, quarantine, side, counts)
                runs = [r for r in runs if not _stored_before(cfg, r, sources_of, drop, already)]
            for run in runs:
                w = writers.get(run)
                if w is not None and cfg.stored_keys_from is None:
                    w.keys_checked = checked.get(run)
                    try:
                        w.check_keys()
                    except Exception as e:
                        raise rollback.refused(e, run, _inputs(sources_of, run), runs) from e
            journal = rollback.Journal(cfg.logs, runs)
            run = ""
            try:
                for i, run in enumerate(runs):
                    if i:
                        journal.done(runs[i - 1])
                    hashes = [s["sha256"] for s in sources_of.get(run, [])]
                    # its quarantine part and side tables (unlisted), then the commit that
                    # lists them with its rows: the run's manifest, naming this ingest and
                    # the side tables' hashes (or, without rollouts, its quarantine log)
                    qpart = quarantine.write_part(run, hashes, journal)
                    if qpart:
                        qfiles.append(str(quarantine_log.run_dir(cfg.logs, run) / qpart["name"]))
                    w = writers.get(run)
                    committed = w is None and store.run_manifest(where, run) is not None
                    if w is None and not (cfg.append and committed):
                        # No rollouts of the run now: replacing keeps the committed run as it
                        # is, side tables too; a run not in the store would get side rows no
                        # manifest lists and no view reads (an orphan), so they are counted as
                        # not written. Its quarantine entries are listed in its quarantine log.
                        if run in side.runs():
                            side_dropped[run] = side.discard_run(run)
                        _commit_quarantine_only(cfg.logs, run, qpart, journal)
                        continue
                    if w is None and run in side.runs():
                        # side rows appended to a committed run that gets no rollouts now: a
                        # manifest with no new rows records them (the history keeps the ingest)
                        w = writers[run] = PartitionWriter(cfg.logs, run, append=True)
                    tables = side.commit_run(run, append=cfg.append, journal=journal)
                    if w is None:
                        _commit_quarantine_only(cfg.logs, run, qpart, journal)
                        continue
                    c = counts.get(run) or RunCounts()
                    record = w.commit(
                        {
                            "ingest": ingest_id,
                            "sources": [_recorded(s) for s in sources_of.get(run, [])],
                            "rows_in": c.rows_in,
                            "quarantined": dict(c.quarantined),
                            "flagged": dict(sorted(c.flagged.items())),
                            "run_config": ctx.run_config.get(run, {}),
                            "notes": {
                                _recorded(s)["path"]: ctx.notes[s["path"]]
                                for s in sources_of.get(run, [])
                                if s["path"] in ctx.notes
                            },
                            "side_tables": _side_record(cfg, run, tables),
                            "wall_time_s": round(time.time() - started, 3),
                            **({quarantine_log.KEY: {"parts": [qpart]}} if qpart else {}),
                        },
                        locked=True,
                        journal=journal,
                    )
                    committed_runs.append(run)
                    if "capabilities" in record:
                        caps[run] = Capabilities.of(run, record["capabilities"])
                if runs:
                    journal.done(runs[-1])
            except BaseException as e:
                journal.rollback()
                if not isinstance(e, Exception):
                    raise
                raise rollback.refused(e, run, _inputs(sources_of, run), runs, undone=True) from e
            journal.finish()
    except BaseException:
        for w in writers.values():
            w.abort()
        quarantine.discard()
        side.abort()
        raise
    if cfg.stored_keys_from is None:  # (a staged object-storage ingest: no local store to keep)
        # ``ddai runs``'s rows of the committed runs, from the committed snapshot, outside the
        # locks: the next listing needs no DuckDB; a failure here leaves the commit as it is
        run_stats.refresh(cfg.logs, committed_runs)
    side_counts = side.counts()
    return IngestResult(
        counts, fmt_of, qfiles, side_counts, ctx.notes, caps, side_dropped, checked, already
    )


@dataclass
class _Dropped:
    """What holds a run's uncommitted rows (to drop those of a run stored already)."""

    writers: dict[str, PartitionWriter]
    quarantine: _Quarantine
    side: SideTables
    counts: dict[str, RunCounts]


def _stored_before(
    cfg: IngestConfig,
    run: str,
    sources_of: dict[str, list[dict[str, Any]]],
    route: _Dropped,
    already: dict[str, str],
) -> bool:
    """Whether a committed ingest of ``run`` read exactly this ingest's sources of it (their
    sha256): then its rows, quarantine and side rows are stored already, and are dropped here
    (``already`` gets the run → that ingest's id). Call under the run's write lock."""
    hashes = [s["sha256"] for s in sources_of.get(run, [])]
    prior = quarantine_log.ingested_by(cfg.stored_keys_from or cfg.logs, run, hashes)
    if prior is None:
        return False
    already[run] = prior
    if cfg.stored_keys_from is None:  # what a killed write left in the run goes (we hold its lock)
        store.collect_garbage(cfg.logs, run)
    if run in route.writers:
        route.writers.pop(run).abort()
    route.quarantine.discard(run)
    route.side.discard_run(run)
    route.counts.pop(run, None)
    return True


def _commit_quarantine_only(
    logs: Path, run: str, part: dict[str, Any] | None, journal: rollback.Journal
) -> None:
    """List ``part`` (a run's entries, when it commits no rollouts) in its quarantine log; the
    unlisted parts of killed ingests go once the command's commits all stood."""
    if part is None:
        return
    quarantine_log.commit_log(logs, run, [part], journal=journal)
    journal.after(lambda: quarantine_log.collect_garbage(logs, run))


EMPTY_FORMAT = "empty (skipped)"  # a source's "format" in the summary when it held no line
EMPTY_NOTE = "skipped: an empty file (no line to read); the other sources were ingested"
EMPTY_PARQUET_NOTE = "skipped: a Parquet file with no row; the other sources were ingested"
BLANK_NOTE = "blank lines skipped"  # a line-based source's note: not rows, not quarantined
_EMPTY_PEEK = 1 << 16


def _empty_sources(sources: list[Path]) -> list[str]:
    """The sources holding no line to read (no byte, or only blank lines) or no row (a Parquet
    file of zero rows), to be skipped with a note while the others ingest; raises ValueError
    when every source is empty."""
    empty = []
    for src in sources:
        size = os.path.getsize(src)
        if _rows_of_parquet(src) == 0:
            empty.append(str(src))
        elif size <= _EMPTY_PEEK:
            with open(src, "rb") as fh:
                text = fh.read()
            if not text.removeprefix(b"\xef\xbb\xbf").strip():
                empty.append(str(src))
    if empty and len(empty) == len(sources):
        what = "no row" if all(_rows_of_parquet(s) == 0 for s in empty) else "no line"
        raise ValueError(
            f"{', '.join(empty)}: empty ({what} to read); nothing to ingest: pass a file that "
            "holds rollouts"
        )
    return empty


def _rows_of_parquet(src: str | Path) -> int | None:
    """A Parquet file's row count from its footer; None for any other file (or an unreadable
    footer, which the format's detection names)."""
    with open(src, "rb") as fh:
        if fh.read(4) != b"PAR1":
            return None
    try:
        return pq.read_metadata(src).num_rows
    except Exception:
        return None


def _naming_input(src: Path, records: Iterator[Any]) -> Iterator[Any]:
    """``records`` (a reader's output), with a failure that ends the reading restated to name
    the input and the fix: no run is committed before every input is read, so nothing was."""
    try:
        yield from records
    except (ValueError, OSError) as e:  # a corrupt or foreign file (ArrowInvalid: ValueError)
        said = str(e).rstrip(". ")
        msg = said if str(src) in said or src.name in said else f"{src}: {said}"
        msg += (
            f"; nothing of this ingest was committed: fix or leave out {src} (or name its "
            "format with --input-format) and run the command again"
        )
        try:
            err = type(e)(msg)
        except TypeError:
            err = ValueError(msg)
        raise err from e


def _recorded(src_info: dict[str, Any]) -> dict[str, Any]:
    """A source's manifest entry: its path made absolute (``os.path.abspath``: symlinks kept as
    the user named them), so lineage run from any folder finds the file; the rest of the ingest
    (notes, quarantine, messages) keeps the path as typed."""
    return {**src_info, "path": os.path.abspath(src_info["path"])}


def _inputs(sources_of: dict[str, list[dict[str, Any]]], run: str) -> list[str]:
    """The inputs that fed ``run`` (for a message naming them)."""
    return [s["path"] for s in sources_of.get(run, [])]


def _side_record(
    cfg: IngestConfig, run: str, tables: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The side tables the run's manifest lists (rows, sha256): those this ingest wrote, plus on
    ``--append`` those an earlier ingest listed that this one left as they were."""
    if not cfg.append:
        return tables
    old = (store.run_manifest(cfg.logs, run) or {}).get("side_tables") or {}
    return {**old, **tables}


def _uid_mapper(cfg: IngestConfig, fmt_of: dict[str, str]) -> UidMapper | None:
    """The verl id mapping ``--uid-field`` / ``--dataset`` ask for (only verl dumps use it)."""
    if not (cfg.uid_field or cfg.dataset):
        return None
    if "verl" not in fmt_of.values():
        raise ValueError(
            "--uid-field and --dataset map verl dumps to dataset ids; none of the sources is a "
            f"verl dump (formats: {', '.join(sorted(set(fmt_of.values())))})"
        )
    return UidMapper.build(cfg.uid_field, cfg.dataset)


@dataclass
class _Routing:
    """Where one source's records go: the run writers, the per-run counts and sources, the
    quarantine and the duplicate check (shared by every source of the ingest but ``src_info``)."""

    cfg: IngestConfig
    writers: dict[str, PartitionWriter]
    counts: dict[str, RunCounts]
    sources_of: dict[str, list[dict[str, Any]]]
    src_info: dict[str, Any]
    quarantine: _Quarantine
    dups: DuplicateKeys

    def charge(self, run: str, rows: int) -> RunCounts:
        """Count ``rows`` read for ``run`` and note this source among the run's sources."""
        c = self.counts.setdefault(run, RunCounts())
        c.rows_in += rows
        if self.src_info not in self.sources_of.setdefault(run, []):
            self.sources_of[run].append(self.src_info)
        return c

    def writer(self, run: str) -> PartitionWriter:
        if run not in self.writers:
            self.writers[run] = PartitionWriter(self.cfg.logs, run, append=self.cfg.append)
        return self.writers[run]


def _route(rec: SourceRecord, src: Path, r: _Routing) -> str:
    """Send one record to its run's writer or quarantine; returns the run it was charged to."""
    cfg = r.cfg
    run = cfg.run_id or rec.run_id or NO_RUN
    try:
        check_run_id(run)
    except ValueError:
        run = NO_RUN
    reason, detail, row = rec.reason, rec.detail, None
    if reason is None:
        try:
            row = normalize_rollout(rec.row, run_id=cfg.run_id)
            run = check_run_id(row["run_id"])
        except RowError as e:
            reason, detail = e.reason, e.detail
        except ValueError as e:
            reason, detail = "bad run id", str(e)
        except Exception as e:  # any other fault of this one row stays with it
            reason, detail = "unreadable row", error_detail(e)
        if reason is None:
            content = rec.raw if rec.raw is not None else json.dumps(rec.row, default=str)
            if (dup := r.dups.check(run, row, content, rec.digest)) is not None:
                reason, detail = dup
    c = r.charge(run, 1)
    if reason is not None:
        c.quarantined[reason] += 1
        r.quarantine.add(run, src, rec, reason, detail)
        return run
    r.writer(run).add(row)
    c.rollouts_out += 1
    c.flagged.update(row["flags"] or ())
    return run


def _route_batch(b: RowBatch, src: Path, r: _Routing) -> str:
    """``_route`` for a batch read in columns: its rows are valid, so only the duplicate check
    runs, over the batch's keys at once (exact repeats quarantined, repeated keys flagged, as for
    single rows)."""
    run = check_run_id(b.run_id)
    table = b.table
    keys = zip(
        table["step"].to_pylist(),
        table["uid"].to_pylist(),
        table["rollout_idx"].to_pylist(),
        strict=True,
    )
    drop: list[int] = []
    flagged: list[int] = []
    c = r.charge(run, table.num_rows)
    for i, (reason, detail) in r.dups.check_batch(run, list(keys), b.digests):
        if reason == DUPLICATE_KEY:
            flagged.append(i)
            continue
        drop.append(i)
        c.quarantined[reason] += 1
        rec = SourceRecord(None, b.lines[i], b.raw(i), reason, detail, run_id=run)
        r.quarantine.add(run, src, rec, reason, detail)
    if flagged:
        at = table.schema.get_field_index("flags")
        table = table.set_column(at, "flags", _with_duplicate_key(table["flags"], flagged))
    if drop:
        keep = np.ones(table.num_rows, bool)
        keep[drop] = False
        table = table.take(int_array(np.flatnonzero(keep)))
    if not table.num_rows:  # as for single rows: no writer for a run that keeps nothing
        return run
    if table["flags"].null_count < table.num_rows:  # the kept rows' flags, as for single rows
        c.flagged.update(pc.list_flatten(table["flags"]).to_pylist())
    r.writer(run).add_table(table)
    c.rollouts_out += table.num_rows
    return run


def _with_duplicate_key(flags: pa.ChunkedArray, rows: list[int]) -> pa.Array:
    """``flags`` (list<string>, one per row) with ``duplicate_key`` added at ``rows``, each list
    sorted and without repeats as for single rows. Built from buffers when every row's flags are
    null (a columnar reader's rows), with no Python object per row; through lists otherwise."""
    n = len(flags)
    if flags.null_count < n:
        lists = flags.to_pylist()
        for i in rows:
            lists[i] = sorted({*(lists[i] or ()), DUPLICATE_KEY})
        return pa.array(lists, flags.type)
    mark = np.zeros(n, bool)
    mark[rows] = True
    k = int(mark.sum())
    word = DUPLICATE_KEY.encode()
    values = pa.Array.from_buffers(
        pa.string(),
        k,
        [None, pa.py_buffer(np.arange(k + 1, dtype=np.int32) * len(word)), pa.py_buffer(word * k)],
    )
    offsets = np.concatenate([[0], np.cumsum(mark)]).astype(np.int32)
    valid = np.packbits(mark, bitorder="little")
    return pa.ListArray.from_buffers(
        flags.type, n, [pa.py_buffer(valid), pa.py_buffer(offsets)], children=[values]
    )
