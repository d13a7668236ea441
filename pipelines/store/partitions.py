"""The log store: hive-partitioned Parquet (``run_id=R/part-*.parquet``), one manifest per partition.

Commit protocol (one per run, under the run's write lock ``_locks/<run>.lock``):

1. rows stream into a claimed temp folder ``.tmp-<run>-<id>/`` beside the partitions;
2. the finished part is renamed into ``run_id=R/`` (invisible: readers read only the files the
   manifest lists);
3. the run's manifest (it lists the partition's files with their sha256, and ``sha256``, the
   digest over them) is committed as one new delta file ``run_id=R/_log/<seq>.json``, created
   atomically under a name that cannot be overwritten (``manifest_log``: ``_manifest.json`` is
   a checkpoint of the folded manifest, rewritten only when the deltas after it outgrow it, so
   a run appended to every step writes linear bytes). That creation is the commit: data and
   manifest become visible together, or (after a crash before it) not at all;
4. files the manifest no longer lists (a replaced version, a crashed write's part) are removed
   when no reader holds the run (``_locks/<run>.readers``), else by the next write.

Side tables (``_side/<table>/<run>.jsonl``) and the quarantine part of an ingest
(``_quarantine/<run>/part-*.jsonl``, ``ddai.pipelines.store.quarantine``) are written under the same
lock just before the manifest, which lists the part (readers read only listed parts, so a kill
before the commit leaves no entry) and each side table with its sha256 (so
``verify_partition`` sees one that does not belong to the committed version; on object storage
a table is a list of part objects, each listed with its rows and sha256: ``side_log``). An
ingest of several runs takes every run's lock and checks every run before committing any, and
journals its commits (``rollback.Journal``) so that a late failure puts the earlier runs back.
Every other writer of a run's data (a judge or value re-score in place, a resumed trainer)
holds the lock and, when it read the run first, commits only if the run is still the version it
read (``if_unchanged``).

Readers take a shared lock on each run, then read its manifest's file list (a ``Snapshot``): one
consistent version of every run, even while it is replaced or appended. Leftovers of a crashed
write (abandoned ``.tmp-*`` folders, ``.old-*`` folders of older versions, a partition without
``_manifest.json``) are never read and are cleaned by the next write. Readers ignore every path
whose name starts with ``_`` or ``.``.

On object storage (``logs`` an ``s3://`` / ``gs://`` URL) the same layout holds; every write
(ingest's included) is staged in the workspace (``Stage``) and published by ``commit_remote``:
parts first, then one conditional create of the manifest log's next delta, the commit, where
``if_unchanged`` and the duplicate check are decided (an ingest's side tables and quarantine
part go first, unlisted: ``remote_store``). Readers read the listed files through the object
store; with no locks there, superseded parts are removed only after a grace period.

``--append``'s duplicate check reads a run's stored keys while the ingest streams (outside the
lock, which a long ingest must not hold); the commit then checks this write's keys against the
files committed since (``check_new_keys``), so two racing appends of the same rollouts never
both land.

Longer than 400 lines because the commit protocol (temp folder, rename, manifest, locks; the
conditional put on object storage) and the readers that rely on it are kept in one place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ddai.pipelines.records import schema
from ddai.pipelines.records.deps import pa, pq
from ddai.pipelines.records.schema import SCHEMA_VERSION, normalize_rollout
from ddai.pipelines.store import (
    capability_count,
    io,
    locks,
    manifest_log,
    objstore,
    quarantine,
    stage,
)
from ddai.pipelines.store.store_read import (
    LOG_DIR,
    MANIFEST,
    QUARANTINE_DIR,
    SIDE_DIR,
    STATS_DIR,
    _lock_file,
    _read_manifest,
    check_run_id,
    committed_files,
    files_digest,
    manifest_version,
    partition_dir,
    run_manifest,
    side_parts_record,
    snapshot,
)

if TYPE_CHECKING:  # pyarrow.dataset pulls pandas in: imported where a dataset is built
    import pyarrow.dataset as ds

    from ddai.pipelines.store.rollback import Journal, RemoteUndo


DEFAULT_BATCH_ROWS = 50_000
# A row group is written when this many rows (or bytes, for wide rows) are staged.
ROW_GROUP_ROWS = 131_072
ROW_GROUP_BYTES = 64 << 20


@contextlib.contextmanager
def run_lock(
    logs: str | os.PathLike[str],
    run_id: str,
    on_wait: Callable[[str], None] | None = locks._say,
) -> Iterator[None]:
    """Hold the write lock of one run (writers to a run serialize; a waiting writer says so).

    Object storage has no file locks: its commits are conditional puts (``remote_store``)."""
    if objstore.is_url(logs):
        yield
        return
    with locks.exclusive(
        _lock_file(logs, run_id, "lock"), f"the write lock of run {run_id!r}", on_wait
    ):
        yield


class StoreConflict(RuntimeError):
    """A write that read the run first found another write committed meanwhile (nothing written)."""


def _file_record(path: Path, rows: int | None = None) -> dict[str, Any]:
    if rows is None:
        rows = pq.ParquetFile(path).metadata.num_rows
    return {"name": path.name, "sha256": io.sha256_file(path), "rows": rows}


class PartitionWriter:
    """Stream rollout rows of one run into Parquet parts with bounded memory.

    Rows are buffered up to ``batch_rows`` and flushed as row groups into a claimed temp folder;
    ``commit`` (under the run's write lock) moves the part in and commits the manifest last.
    ``abort`` leaves the store as it was. On object storage (``logs`` a URL) the part is written
    into a local staging store that ``commit`` publishes (``commit_remote``).
    """

    def __init__(
        self,
        logs: str | os.PathLike[str],
        run_id: str,
        *,
        append: bool = False,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> None:
        self.remote = objstore.url_of(logs)
        self._staging: stage.Stage | None = None
        if self.remote is not None:  # no rename there: stage locally, publish at commit
            objstore.require_bucket(self.remote)  # now, not at the commit after the rows
            self._staging = stage.stage_dir()
            logs = Path(self._staging.name) / "logs"
        self.logs = Path(logs)
        self.run_id = run_id
        self.final = partition_dir(logs, run_id)
        self.append = append
        self.batch_rows = batch_rows
        self.logs.mkdir(parents=True, exist_ok=True)
        self.tmp = self.logs / f".tmp-{check_run_id(run_id)}-{uuid.uuid4().hex[:8]}"
        # made already claimed: another write's cleaning never sees it unclaimed
        self._claim: IO[str] | None = locks.claimed_dir(self.tmp)
        self.part = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        self._writer: pq.ParquetWriter | None = None
        self._buf: list[dict[str, Any]] = []
        self._tables: list[pa.Table] = []
        self._staged_rows = 0
        self._staged_bytes = 0
        self.rows = 0
        # What the written rollouts carry, counted batch by batch (DESIGN: a run's manifest says so)
        self.capabilities = capability_count.empty()
        # ``--append``'s duplicate check: the committed files whose keys it read (None: no check)
        self.keys_checked: set[str] | None = None

    def add(self, row: dict[str, Any]) -> None:
        self._buf.append(row)
        if len(self._buf) >= self.batch_rows:
            self._rows_to_table()

    def add_table(self, table: pa.Table) -> None:
        """Add rows already in (or castable to) ``ROLLOUT_SCHEMA``, after the rows added before."""
        self._rows_to_table()
        self._stage(table.select(schema.ROLLOUT_SCHEMA.names).cast(schema.ROLLOUT_SCHEMA))

    def _stage(self, table: pa.Table) -> None:
        # Tables wait until a large row group is full: readers scan a few big groups faster than
        # one small group per reader batch.
        self._tables.append(table)
        self._staged_rows += table.num_rows
        self._staged_bytes += table.nbytes
        if self._staged_rows >= ROW_GROUP_ROWS or self._staged_bytes >= ROW_GROUP_BYTES:
            self._write_staged()

    def _write_staged(self) -> None:
        if not self._tables:
            return
        table = pa.concat_tables(self._tables)
        self._tables, self._staged_rows, self._staged_bytes = [], 0, 0
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self.tmp / self.part, schema.ROLLOUT_SCHEMA, compression="zstd"
            )
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self.rows += table.num_rows
        self.capabilities = capability_count.add(
            self.capabilities, capability_count.count_arrow(table)
        )

    def _rows_to_table(self) -> None:
        if self._buf:
            self._stage(pa.Table.from_pylist(self._buf, schema=schema.ROLLOUT_SCHEMA))
            self._buf = []

    def _flush(self) -> None:
        self._rows_to_table()
        self._write_staged()

    def commit(
        self,
        manifest: dict[str, Any],
        *,
        locked: bool = False,
        if_unchanged: str | None = None,
        journal: Journal | None = None,
    ) -> dict[str, Any]:
        """Commit the written rows with ``manifest``; ``locked``: the caller holds ``run_lock``.

        ``if_unchanged``: the ``manifest_version`` of the run as the caller read it; another
        commit since then raises ``StoreConflict`` and writes nothing (a read-modify-write never
        drops rows appended meanwhile). ``journal`` (a local store, one command committing
        several runs): the files replaced are kept there for a rollback and the superseded
        files are collected only when the journal finishes."""
        self._close()
        if self.remote is not None:
            return self._publish(manifest, if_unchanged)
        if locked:
            return self._commit(manifest, if_unchanged, journal)
        with run_lock(self.logs, self.run_id):
            return self._commit(manifest, if_unchanged, journal)

    def _close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _publish(self, manifest: dict[str, Any], if_unchanged: str | None) -> dict[str, Any]:
        assert self.remote is not None
        try:
            self._commit(manifest)  # into the staging store, which nobody else sees
            record = commit_remote(
                self.logs,
                self.remote,
                self.run_id,
                append=self.append,
                if_unchanged=if_unchanged,
                keys_checked=self.keys_checked,
            )
        finally:
            self._drop_stage()
        assert record is not None
        return record

    def check_keys(self) -> None:
        """``--append``'s duplicate check, finished at commit: keys read from the run before
        other writes committed are checked against the rows those writes added. Raises
        ``StoreConflict`` naming the run when this write repeats one of them (nothing written).
        Local stores: call under the run's write lock, after the last row is added."""
        if self.keys_checked is None or self.remote is not None:
            return  # object storage: checked in the conditional commit (commit_remote)
        self._close()
        check_new_keys(self.final, _read_manifest(self.final), self.keys_checked, self._own_parts())

    def _own_parts(self) -> list[Path]:
        return [self.tmp / self.part] if (self.tmp / self.part).exists() else []

    def _commit(
        self,
        manifest: dict[str, Any],
        if_unchanged: str | None = None,
        journal: Journal | None = None,
    ) -> dict[str, Any]:
        state = manifest_log.read_state(self.final)
        old = state.manifest
        if if_unchanged is not None and (old is None or manifest_version(old) != if_unchanged):
            raise StoreConflict(
                f"run {self.run_id!r} changed in {self.logs} while this command worked on it "
                "(another write committed); nothing was written: run the command again"
            )
        if self.remote is None:
            check_new_keys(self.final, old, self.keys_checked, self._own_parts())
        clean_leftovers(self.logs)
        files: list[dict[str, Any]] = []
        prev = old
        if self.append and old is not None:
            files = (
                old["files"]
                if "files" in old
                else [_file_record(f) for f in committed_files(self.final, old)]
            )
        else:
            old = None  # a replaced partition (or one without a manifest) keeps no history
        listed = (prev or {}).get("side_tables")
        if listed and "side_tables" not in manifest:
            manifest = {**manifest, "side_tables": listed}  # not this write's: left as they are
        # quarantine parts accumulate across commits (a replace's too); this write's are listed
        # here, in the commit that makes its rows visible
        q = quarantine.merged((prev or {}).get(quarantine.KEY), manifest.get(quarantine.KEY))
        manifest = {k: v for k, v in manifest.items() if k != quarantine.KEY}
        if q is not None:
            manifest[quarantine.KEY] = q
        if journal is not None:
            journal.mkdir(self.final)  # the manifest's files are saved by manifest_log.commit
        self.final.mkdir(exist_ok=True)
        if (self.tmp / self.part).exists():
            new = _file_record(self.tmp / self.part, self.rows)
            if journal is not None:
                journal.save(self.final / self.part)  # new: a rollback removes it
            os.replace(self.tmp / self.part, self.final / self.part)
            files = [*files, new]
        record = {
            "run_id": self.run_id,
            "schema_version": SCHEMA_VERSION,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **manifest,
            "rollouts_out": self.rows,
        }
        record = merge_record(old, record, self.capabilities, files)
        io.crash_point(f"partition-data:{self.run_id}")
        # the commit point: the log's next delta (a replace also checkpoints, a new chain)
        manifest_log.commit(self.final, record, state, replace=old is None, journal=journal)
        self._drop_tmp()
        if journal is None:
            collect_garbage(self.logs, self.run_id)
        else:  # a rollback needs the replaced version's files
            logs, run = self.logs, self.run_id
            journal.after(lambda: collect_garbage(logs, run))
        return record

    def _drop_tmp(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._drop_tmp()
        self._drop_stage()

    def _drop_stage(self) -> None:
        if self._staging is not None:
            self._staging.cleanup()
            self._staging = None


KEY_COLUMNS = ["step", "uid", "rollout_idx"]


def stored_keys(
    logs: str | os.PathLike[str], run: str, checked: dict[str, set[str]]
) -> Iterator[tuple[Any, ...]]:
    """The (step, uid, rollout_idx) keys committed in ``run`` (none when it is not in the store
    yet), read from one snapshot; records in ``checked[run]`` the names of the files they came
    from, so the commit can check what other writes added since (``check_new_keys``)."""
    if run_manifest(logs, run) is None:
        checked[run] = set()
        return
    with snapshot(logs, [run]) as snap:
        files = snap.all_files()
        checked[run] = {_name(f) for f in files}
        for batch in arrow_dataset(files).to_batches(columns=KEY_COLUMNS):
            yield from zip(*(batch.column(c).to_pylist() for c in KEY_COLUMNS), strict=True)


def check_new_keys(
    part: str | os.PathLike[str],
    man: dict[str, Any] | None,
    checked: set[str] | None,
    mine: list[Any],
) -> None:
    """Raise ``StoreConflict`` when a file of partition ``part``'s committed version ``man`` that
    the duplicate check did not read (``checked``: the names it read; None: no check) holds a key
    of this write's ``mine`` files: another append committed the same rollouts meanwhile."""
    if checked is None or man is None or not mine:
        return
    new = [f for f in committed_files(part, man) if _name(f) not in checked]
    if not new:
        return
    theirs = _keys(new)
    both = _keys(mine) & theirs
    if both:
        run = man.get("run_id") or Path(part).name.split("=", 1)[-1]
        step, uid, idx = min(both, key=repr)
        raise StoreConflict(
            f"run {run!r}: another append committed {len(both)} of this write's rollouts while "
            f"it ran (e.g. (step, uid, rollout_idx) = ({step}, {uid!r}, {idx})); nothing was "
            "written: run the command again (the repeated rollouts are then quarantined as "
            "already stored)"
        )


def _keys(files: list[Any]) -> set[tuple[Any, ...]]:
    t = arrow_dataset(files).to_table(columns=KEY_COLUMNS)
    return set(zip(*(t.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))


def _name(f: Any) -> str:
    return os.fspath(f).rstrip("/").rsplit("/", 1)[-1]


def merge_record(
    old: dict[str, Any] | None,
    record: dict[str, Any],
    capabilities: dict[str, Any],
    files: list[dict[str, Any]],
) -> dict[str, Any]:
    """A partition's new manifest: ``record`` (this write, ``rollouts_out`` rows carrying
    ``capabilities``) over ``old`` (the manifest appended to, None for a replace), listing
    ``files`` (the old version's, then this write's)."""
    record = dict(record)
    rows = record["rollouts_out"]
    if old:
        record["history"] = [*old.get("history", []), _strip_history(old)]
        record["rollouts_total"] = old.get("rollouts_total", old.get("rollouts_out", 0)) + rows
    else:
        record["rollouts_total"] = rows
    # Counts over the whole partition; an appended-to partition from before the counts existed
    # gets none (readers then count it, see ddai.pipelines.store.capabilities).
    if not old:
        record["capabilities"] = capabilities
    elif "capabilities" in old:
        record["capabilities"] = capability_count.add(old["capabilities"], capabilities)
    record["files"] = files
    record["sha256"] = files_digest(files)
    return record


def clean_leftovers(logs: str | os.PathLike[str]) -> list[str]:
    """Remove what crashed writes left in the store: abandoned ``.tmp-*`` folders and spool
    files (their claim is free: quarantine and side-table spools included), claims a kill left
    half taken (``.claiming-*``), ``.old-*`` folders, and abandoned staging folders of object
    storage writes in the workspace. Returns the names removed."""
    root = Path(logs)
    removed: list[str] = []
    side = root / SIDE_DIR
    tables = sorted(d for d in side.iterdir() if d.is_dir()) if side.is_dir() else []
    qdir = root / QUARANTINE_DIR
    runs_q = sorted(d for d in qdir.iterdir() if d.is_dir()) if qdir.is_dir() else []
    for base in (root, qdir, *runs_q, *tables, root / STATS_DIR):
        if not base.is_dir():
            continue
        for entry in base.iterdir():
            name = entry.name
            temp = name.startswith(".tmp-") or (
                name.startswith(".") and name.endswith(".tmp")  # an atomic write's (io)
            )
            if name.startswith(locks.CLAIMING):
                if locks.remove_claiming(entry):
                    removed.append(name)
                continue
            stale = name.startswith(".old-") or (temp and locks.is_abandoned(entry))
            if stale:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed.append(name)
    removed += stage.clean_stages()
    return removed


def collect_garbage(logs: str | os.PathLike[str], run_id: str) -> list[str]:
    """Remove the files of ``run_id``'s partition its manifest does not list (a superseded
    version, a crashed write's part or temp), unless a reader holds the run: then the next write
    does. Call with the run's write lock held. Returns the names removed."""
    part = partition_dir(logs, run_id)
    if not part.is_dir():
        return []
    fh = locks.try_exclusive(_lock_file(logs, run_id, "readers"))
    if fh is None:
        return []
    try:
        man = _read_manifest(part)
        keep = {f.name for f in committed_files(part, man)} | (
            {MANIFEST, LOG_DIR} if man else set()
        )
        removed = []
        for tmp in manifest_log.stale_temps(part):  # a crashed commit's (we hold the write lock)
            tmp.unlink(missing_ok=True)
            removed.append(f"{LOG_DIR}/{tmp.name}")
        for entry in part.iterdir():
            if entry.name not in keep:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed.append(entry.name)
        removed += [
            f"{QUARANTINE_DIR}/{run_id}/{n}" for n in quarantine.collect_garbage(logs, run_id)
        ]
        return removed
    finally:
        fh.close()


def verify_partition(part: str | os.PathLike[str]) -> str | None:
    """Re-hash a partition's committed files against its manifest: why they differ, or None."""
    p = Path(part)
    try:
        man = _read_manifest(p)
    except manifest_log.ManifestLogGap as e:
        return str(e)
    if man is None:
        return f"no {MANIFEST} (an interrupted write)"
    if "files" not in man:
        return None  # written before manifests listed files: nothing to compare
    bad = []
    url = objstore.url_of(part)
    for f in man["files"]:
        if why := io.differs(objstore.join(url, f["name"]) if url else p / f["name"], f["sha256"]):
            bad.append(f"{f['name']} {why}")
    # side tables the committed ingest wrote (a kill between them and the manifest, or an edit)
    run = man.get("run_id") or p.name.split("=", 1)[-1]
    root: Any = url.rsplit("/", 1)[0] if url else p.parent
    for table, rec in sorted((man.get("side_tables") or {}).items()):
        base = objstore.join(root, SIDE_DIR, table) if url else root / SIDE_DIR / table
        # one file (a local store, an ingest before parts), or parts appended per step on
        # object storage: one object each
        for sp in side_parts(rec, run):
            fp = objstore.join(base, *sp["name"].split("/")) if url else base / sp["name"]
            what = f"side table {table}" + (f" part {sp['name']}" if "parts" in rec else "")
            if why := io.differs(fp, sp["sha256"]):
                bad.append(f"{what} {why}")
    bad += quarantine.verify(root, run, man)
    return "; ".join(bad) or None


def side_parts(rec: dict[str, Any], run: str) -> list[dict[str, Any]]:
    """The parts (``name`` under ``_side/<table>/``, ``rows``, ``sha256``) of a listed side
    table; a table kept as one file (``<run>.jsonl``) is its own single part."""
    if "parts" in rec:
        return list(rec["parts"])
    return [{"name": f"{run}.jsonl", "rows": rec["rows"], "sha256": rec["sha256"]}]


# Partition-wide fields the new manifest carries up to date: a history entry keeps only what its own
# commit added, so a run appended to every training step grows its manifest linearly, not with
# every earlier file list (quadratic bytes).
_CURRENT_ONLY = ("history", "files", "sha256", "capabilities")


def _strip_history(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if k not in _CURRENT_ONLY}
    if out.get(quarantine.KEY):  # grows per ingest: the current manifest lists the parts
        out[quarantine.KEY] = {k: v for k, v in out[quarantine.KEY].items() if k != "parts"}
    if out.get("side_tables"):  # a side table's part list grows per step: current only too
        out["side_tables"] = {
            t: {k: v for k, v in rec.items() if k != "parts"}
            for t, rec in out["side_tables"].items()
        }
    return out


def write_run(
    logs: str | os.PathLike[str],
    run_id: str,
    rows: Iterable[dict[str, Any]] | pa.Table,
    *,
    append: bool = False,
    sources: list[dict[str, Any]] | None = None,
    normalize: bool = True,
    manifest: dict[str, Any] | None = None,
    if_unchanged: str | None = None,
) -> dict[str, Any]:
    """Write one run's rollouts (dicts or a table) into the store; returns the partition manifest.

    Dict rows pass through ``normalize_rollout`` (so derived fields are filled and ``run_id`` is
    forced to ``run_id``) unless ``normalize=False``. Replaces the partition unless ``append``.
    ``if_unchanged``: see ``PartitionWriter.commit`` (pass ``read_version``'s version when the
    rows were computed from the run itself).
    """
    w = PartitionWriter(logs, run_id, append=append)
    try:
        if isinstance(rows, pa.Table):
            rows = rows.set_column(
                rows.schema.get_field_index("run_id"),
                "run_id",
                pa.array([run_id] * rows.num_rows, pa.string()),
            )
            w.add_table(rows)
        else:
            for r in rows:
                w.add(normalize_rollout(r, run_id=run_id) if normalize else r)
        info = {"sources": sources or [], **(manifest or {})}
        return w.commit(info, if_unchanged=if_unchanged)
    except BaseException:
        w.abort()
        raise


def dataset(logs: str | os.PathLike[str], runs: list[str] | None = None) -> ds.Dataset:
    """A lazy dataset over one snapshot of ``runs``; the snapshot is held while it lives."""
    snap = snapshot(logs, runs)
    try:
        d = arrow_dataset(snap.all_files())
    except BaseException:
        snap.release()
        raise
    snap.keep_while(d)
    return d


def read_rollouts(
    logs: str | os.PathLike[str],
    runs: list[str] | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """All rollouts of the store (or of ``runs``) as one table in ``ROLLOUT_SCHEMA``."""
    with snapshot(logs, runs) as snap:
        return arrow_dataset(snap.all_files()).to_table(columns=columns)


def arrow_dataset(files: list[Any]) -> ds.Dataset:
    """A pyarrow dataset over store files in ``ROLLOUT_SCHEMA`` (local paths, or URLs read
    through pyarrow's own object-store filesystem)."""
    import pyarrow.dataset as ds

    urls = [objstore.url_of(f) for f in files]
    fs = objstore.arrow_fs(urls[0]) if urls and urls[0] else None
    return ds.dataset(
        [objstore.key_of(u) if u else str(f) for u, f in zip(urls, files, strict=True)],
        schema=schema.ROLLOUT_SCHEMA,
        format="parquet",
        partitioning=None,
        filesystem=fs,
    )


def read_version(
    logs: str | os.PathLike[str], run: str, columns: list[str] | None = None
) -> tuple[pa.Table, str]:
    """One run's rollouts and the ``manifest_version`` they were read at (for ``if_unchanged``)."""
    with snapshot(logs, [run]) as snap:
        table = arrow_dataset(snap.all_files()).to_table(columns=columns)
        return table, manifest_version(snap.manifests[run])


# ------------------------------------------------------------------ committing to object storage
# Object stores have no rename and no locks: the staged run's parts go up under unique names
# (invisible until a manifest lists them), then the manifest log's next delta is created with a
# conditional put (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``): the commit.

_REMOTE_RETRIES = 8
_OWN = ("history", "rollouts_total", "capabilities", "files", "sha256")


def commit_remote(
    stage: Path,
    url: str,
    run: str,
    *,
    append: bool,
    side: dict[str, dict[str, Any]] | None = None,
    if_unchanged: str | None = None,
    keys_checked: set[str] | None = None,
    rename: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    undo: RemoteUndo | None = None,
    gc: bool = True,
) -> dict[str, Any] | None:
    """Commit run ``run`` committed in local staging store ``stage`` to the store at ``url``:
    its parts, then the manifest with a conditional put. Returns the committed manifest (None
    when the stage has no such run).

    A lost put is merged again over the new version (an append keeps both appends) and retried.
    ``side``: the side tables this write published (an ingest; None: a rewrite of the rollouts
    alone, which keeps the run's side tables as they are). ``if_unchanged``: the
    ``manifest_version`` the rows were computed from; ``keys_checked``: the files ``--append``'s
    duplicate check read (``check_new_keys``). Either failing raises ``StoreConflict`` with
    nothing committed. ``rename``: applied to the staged manifest first. ``side`` lists each
    table's new ``parts`` (objects already put): an append lists them after the run's parts, a
    replace lists them alone. ``undo``: records what the commit changed (``rollback``);
    ``gc=False`` leaves the superseded objects for the caller to collect once its other runs
    committed too (a rollback needs them)."""
    new = run_manifest(stage, run)
    if new is None:
        return None
    new = rename(new) if rename else new
    part_url = objstore.join(url, f"run_id={check_run_id(run)}")
    check_remote(stage, url, run, if_unchanged=if_unchanged, keys_checked=keys_checked)
    for f in new["files"]:
        objstore.put_file(stage / f"run_id={run}" / f["name"], objstore.join(part_url, f["name"]))
        if undo is not None:
            undo.created.append(objstore.join(part_url, f["name"]))
    for _ in range(_REMOTE_RETRIES):
        state = manifest_log.read_state(part_url)
        old = state.manifest
        check_remote(stage, url, run, old, if_unchanged=if_unchanged, keys_checked=keys_checked)
        record = dict(new)
        if side is None and old and "side_tables" in old:
            # not this write's: left as they are (plus any a rollout commit lists first)
            record["side_tables"] = {**old["side_tables"], **(new.get("side_tables") or {})}
        elif side is not None:
            kept = (old or {}).get("side_tables") or {} if append else {}
            record["side_tables"] = {**kept, **_merge_side(kept, side, run)}
        # else: no side tables before, the staged ones (if any) as ``new`` lists them
        # quarantine parts accumulate (a replace's too); this write's (put already) listed here
        q = quarantine.merged(quarantine.adopted(url, run, old), new.get(quarantine.KEY))
        record.pop(quarantine.KEY, None)
        if q is not None:
            record[quarantine.KEY] = q
        if append and old is not None:
            old_files = old.get("files")
            if old_files is None:  # written before manifests listed files: list them now
                old_files = [
                    {"name": _name(u), "sha256": objstore.sha256(u)}
                    for u in committed_files(part_url, old)
                ]
            base = {k: v for k, v in record.items() if k not in _OWN}
            record = merge_record(
                old, base, new.get("capabilities", {}), [*old_files, *new["files"]]
            )
        try:  # the commit: the log's next delta, created only if no other writer made it
            done = manifest_log.commit(
                part_url, record, state, replace=not (append and old is not None)
            )
        except objstore.ConflictError:
            continue  # another writer committed first: merge over its version
        if undo is not None:
            undo.part_url, undo.seq, undo.before = part_url, done.seq, old
        if gc:
            collect_remote_garbage(part_url, record)
            if side is not None:
                collect_remote_side_garbage(url, run, record.get("side_tables") or {})
                quarantine.collect_garbage(url, run)
        return record
    raise StoreConflict(
        f"run {run!r} at {url}: {_REMOTE_RETRIES} concurrent commits in a row beat this one; "
        "nothing was committed: run the command again"
    )


_UNREAD: Any = object()


def check_remote(
    stage: Path,
    url: str,
    run: str,
    old: dict[str, Any] | None = _UNREAD,
    *,
    if_unchanged: str | None = None,
    keys_checked: set[str] | None = None,
) -> None:
    """Raise ``StoreConflict`` when committing staged ``run`` over ``old`` (the remote manifest;
    read when not given) would break ``if_unchanged`` or repeat rollouts another append
    committed since the duplicate check read the run (see ``commit_remote``)."""
    if if_unchanged is None and keys_checked is None:
        return
    part_url = objstore.join(url, f"run_id={check_run_id(run)}")
    if old is _UNREAD:
        old = _read_manifest(part_url)
    if if_unchanged is not None and (old is None or manifest_version(old) != if_unchanged):
        raise StoreConflict(
            f"run {run!r} changed in {url} while this command worked on it (another write "
            "committed); nothing was written: run the command again"
        )
    staged = (run_manifest(stage, run) or {}).get("files", [])
    mine = [partition_dir(stage, run) / f["name"] for f in staged]
    check_new_keys(part_url, old, keys_checked, mine)


def _merge_side(
    kept: dict[str, dict[str, Any]], side: dict[str, dict[str, Any]], run: str
) -> dict[str, dict[str, Any]]:
    """Side-table records of a commit listing ``side``'s new parts after ``kept``'s (the tables
    an append keeps; empty for a replace). A record without ``parts`` is listed as it is."""
    out = {}
    for table, rec in side.items():
        if "parts" not in rec:
            out[table] = rec
            continue
        before = side_parts(kept[table], run) if table in kept else []
        out[table] = side_parts_record([*before, *rec["parts"]])
    return out


def collect_remote_side_garbage(
    url: str, run: str, listed: dict[str, dict[str, Any]], *, now: float | None = None
) -> list[str]:
    """Remove ``run``'s side-table objects under ``url/_side/`` that ``listed`` (the committed
    manifest's ``side_tables``) does not name and that are older than the grace period: parts a
    replaced table or a resumed run's rewrite superseded. Returns ``table/name`` of each."""
    keep = {(t, p["name"]) for t, rec in listed.items() for p in side_parts(rec, run)}
    removed = []
    side = objstore.join(url, SIDE_DIR)
    for table in objstore.listdir(side):
        base = objstore.join(side, table)
        entries = objstore.listdir(base)
        names = [f"{run}.jsonl"] if f"{run}.jsonl" in entries else []
        if run in entries:  # the folder of the run's parts
            names += [f"{run}/{n}" for n in objstore.listdir(objstore.join(base, run))]
        stale = [n for n in names if (table, n) not in keep]
        removed += [f"{table}/{n}" for n in objstore.remove_stale(base, stale, now=now)]
    return removed


def collect_remote_garbage(
    part_url: str, man: dict[str, Any], *, now: float | None = None
) -> list[str]:
    """Remove objects of a partition its manifest ``man`` does not list and older than the grace
    period (a reader that listed them before this commit may still be reading them)."""
    keep = {f["name"] for f in man.get("files", [])} | {MANIFEST, LOG_DIR}
    stale = [n for n in objstore.listdir(part_url) if n not in keep]
    return objstore.remove_stale(part_url, stale, now=now)
