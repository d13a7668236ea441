"""The log store: hive-partitioned Parquet (``run_id=R/part-*.parquet``), one manifest per partition.

Writes are atomic per partition: new parts go to a temp folder that replaces the partition in one
rename (or, with ``append``, are renamed in next to the existing parts). Readers ignore every path
whose name starts with ``_`` or ``.`` (manifests, quarantine, temp folders).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ddai.pipelines import capability_count, io
from ddai.pipelines.schema import ROLLOUT_SCHEMA, SCHEMA_VERSION, normalize_rollout

MANIFEST = "_manifest.json"
QUARANTINE_DIR = "_quarantine"
DEFAULT_BATCH_ROWS = 50_000
_SAFE_RUN_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:+@")


def check_run_id(run_id: str) -> str:
    """Run ids become folder names: refuse separators and other unsafe characters."""
    if not run_id or run_id.startswith((".", "_")) or not set(run_id) <= _SAFE_RUN_CHARS:
        raise ValueError(
            f"run id {run_id!r} is not usable as a folder name; use letters, digits and . _ - : + @ "
            "(not starting with . or _)"
        )
    return run_id


def partition_dir(logs: str | os.PathLike[str], run_id: str) -> Path:
    return Path(logs) / f"run_id={check_run_id(run_id)}"


class PartitionWriter:
    """Stream rollout rows of one run into Parquet parts with bounded memory.

    Rows are buffered up to ``batch_rows`` and flushed as row groups; ``commit`` swaps the partition
    in atomically and writes its ``_manifest.json``. ``abort`` leaves the store as it was.
    """

    def __init__(
        self,
        logs: str | os.PathLike[str],
        run_id: str,
        *,
        append: bool = False,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> None:
        self.logs = Path(logs)
        self.run_id = run_id
        self.final = partition_dir(logs, run_id)
        self.append = append
        self.batch_rows = batch_rows
        self.logs.mkdir(parents=True, exist_ok=True)
        self.tmp = self.logs / f".tmp-{check_run_id(run_id)}-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self.part = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        self._writer: pq.ParquetWriter | None = None
        self._buf: list[dict[str, Any]] = []
        self.rows = 0
        # What the written rollouts carry, counted batch by batch (DESIGN: a run's manifest says so)
        self.capabilities = capability_count.empty()

    def add(self, row: dict[str, Any]) -> None:
        self._buf.append(row)
        if len(self._buf) >= self.batch_rows:
            self._flush()

    def add_table(self, table: pa.Table) -> None:
        self._flush()
        self._write(table.select(ROLLOUT_SCHEMA.names).cast(ROLLOUT_SCHEMA))

    def _write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self.tmp / self.part, ROLLOUT_SCHEMA, compression="zstd"
            )
        self._writer.write_table(table)
        self.rows += table.num_rows
        self.capabilities = capability_count.add(
            self.capabilities, capability_count.count_table(table)
        )

    def _flush(self) -> None:
        if self._buf:
            self._write(pa.Table.from_pylist(self._buf, schema=ROLLOUT_SCHEMA))
            self._buf = []

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._flush()
        if self._writer is not None:
            self._writer.close()
        old = _read_manifest(self.final) if self.append else None
        if self.append and self.final.exists():
            if (self.tmp / self.part).exists():
                os.replace(self.tmp / self.part, self.final / self.part)
            shutil.rmtree(self.tmp)
        else:
            backup = None
            if self.final.exists():
                backup = self.logs / f".old-{self.final.name}-{uuid.uuid4().hex[:8]}"
                os.replace(self.final, backup)
            os.replace(self.tmp, self.final)
            if backup is not None:
                shutil.rmtree(backup)
        record = {
            "run_id": self.run_id,
            "schema_version": SCHEMA_VERSION,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **manifest,
            "rollouts_out": self.rows,
        }
        if old:
            record["history"] = [*old.get("history", []), _strip_history(old)]
            record["rollouts_total"] = (
                old.get("rollouts_total", old.get("rollouts_out", 0)) + self.rows
            )
        else:
            record["rollouts_total"] = self.rows
        # Counts over the whole partition; an appended-to partition from before the counts existed
        # gets none (readers then count it, see ddai.pipelines.capabilities).
        if not old:
            record["capabilities"] = self.capabilities
        elif "capabilities" in old:
            record["capabilities"] = capability_count.add(old["capabilities"], self.capabilities)
        io.write_json(self.final / MANIFEST, record)
        return record

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _strip_history(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "history"}


def _read_manifest(part: Path) -> dict[str, Any] | None:
    p = part / MANIFEST
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def write_run(
    logs: str | os.PathLike[str],
    run_id: str,
    rows: Iterable[dict[str, Any]] | pa.Table,
    *,
    append: bool = False,
    sources: list[dict[str, Any]] | None = None,
    normalize: bool = True,
    manifest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write one run's rollouts (dicts or a table) into the store; returns the partition manifest.

    Dict rows pass through ``normalize_rollout`` (so derived fields are filled and ``run_id`` is
    forced to ``run_id``) unless ``normalize=False``. Replaces the partition unless ``append``.
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
        return w.commit(info)
    except BaseException:
        w.abort()
        raise


def list_runs(logs: str | os.PathLike[str]) -> list[str]:
    p = Path(logs)
    if not p.is_dir():
        return []
    return sorted(
        d.name.split("=", 1)[1] for d in p.iterdir() if d.is_dir() and d.name.startswith("run_id=")
    )


def run_manifest(logs: str | os.PathLike[str], run_id: str) -> dict[str, Any] | None:
    return _read_manifest(partition_dir(logs, run_id))


def parquet_files(logs: str | os.PathLike[str], runs: list[str] | None = None) -> list[Path]:
    """Data files of the store (or of the named runs), skipping ``_``/``.``-prefixed paths."""
    root = Path(logs)
    wanted = runs if runs else list_runs(root)
    missing = [r for r in wanted if not partition_dir(root, r).is_dir()]
    if missing:
        known = ", ".join(list_runs(root)) or "none"
        raise FileNotFoundError(f"run(s) {', '.join(missing)} not in {root} (known runs: {known})")
    files: list[Path] = []
    for r in wanted:
        files.extend(
            f
            for f in sorted(partition_dir(root, r).glob("*.parquet"))
            if not f.name.startswith(("_", "."))
        )
    return files


def dataset(logs: str | os.PathLike[str], runs: list[str] | None = None) -> ds.Dataset:
    files = parquet_files(logs, runs)
    return ds.dataset(
        [str(f) for f in files],
        schema=ROLLOUT_SCHEMA,
        format="parquet",
        partitioning=None,
    )


def read_rollouts(
    logs: str | os.PathLike[str],
    runs: list[str] | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """All rollouts of the store (or of ``runs``) as one table in ``ROLLOUT_SCHEMA``."""
    return dataset(logs, runs).to_table(columns=columns)


def quarantine_path(logs: str | os.PathLike[str], run_id: str) -> Path:
    return Path(logs) / QUARANTINE_DIR / f"{check_run_id(run_id)}.jsonl"
