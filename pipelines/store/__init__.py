"""The log store: hive-partitioned Parquet runs, their commit protocol, manifests, locks, object
storage, quarantine, side tables and per-run stats, and DuckDB's views over them.

The public surface is the names below, read as ``from ddai.pipelines.store import read_rollouts``
or ``store.write_run(...)`` after ``from ddai.pipelines import store``:

* reading a store without pyarrow (``store_read``): ``list_runs``, ``run_manifest``,
  ``snapshot``/``Snapshot``, ``committed_files``, ``parquet_files``, ``partition_dir``,
  ``partition_manifest``, ``manifest_version``, ``check_run_id`` and the layout's folder names;
* writing and reading rollouts (``partitions``): ``write_run``, ``PartitionWriter``, ``run_lock``,
  ``StoreConflict``, ``read_rollouts``, ``read_version``, ``dataset``, ``arrow_dataset``, the
  duplicate check (``stored_keys``), verification and garbage collection, the object-storage
  commit (``commit_remote``, ``check_remote``) and its staging (``Stage``).

Each name is loaded from its module at first use (PEP 562), so ``ddai runs``, which reads
manifests only, never imports the writers. The store's other modules are imported by name
(``from ddai.pipelines.store import io, objstore, query``): the rooms above use those directly
where no name here covers them (``query`` for DuckDB's views, ``capabilities``, ``run_stats``,
``workspace``, ``annotations``).
"""

# No ``from __future__ import annotations`` here: it would bind the package's name
# ``annotations`` and shadow the submodule of that name in ``from ddai.pipelines.store import``.
from typing import TYPE_CHECKING

from ddai.pipelines.records.lazy import lazy_names

__all__ = [
    "GRACE_ENV",
    "LOCK_DIR",
    "LOG_DIR",
    "MANIFEST",
    "QUARANTINE_DIR",
    "SIDE_DIR",
    "STAGE_DIR",
    "STATS_DIR",
    "PartitionWriter",
    "Snapshot",
    "Stage",
    "StoreConflict",
    "arrow_dataset",
    "check_remote",
    "check_run_id",
    "clean_leftovers",
    "collect_garbage",
    "collect_remote_garbage",
    "collect_remote_side_garbage",
    "commit_remote",
    "committed_files",
    "dataset",
    "files_digest",
    "list_runs",
    "manifest_version",
    "parquet_files",
    "partition_dir",
    "partition_manifest",
    "read_rollouts",
    "read_version",
    "run_lock",
    "run_manifest",
    "side_parts",
    "side_parts_record",
    "snapshot",
    "stored_keys",
    "verify_partition",
    "write_run",
]
_READ = {  # from ``store_read`` (no pyarrow)
    "LOCK_DIR",
    "LOG_DIR",
    "MANIFEST",
    "QUARANTINE_DIR",
    "SIDE_DIR",
    "STATS_DIR",
    "Snapshot",
    "check_run_id",
    "committed_files",
    "files_digest",
    "list_runs",
    "manifest_version",
    "parquet_files",
    "partition_dir",
    "partition_manifest",
    "run_manifest",
    "side_parts_record",
    "snapshot",
}
_ELSEWHERE = {"GRACE_ENV": "objstore", "STAGE_DIR": "stage", "Stage": "stage"}
_HOME = {n: _ELSEWHERE.get(n, "store_read" if n in _READ else "partitions") for n in __all__}

if TYPE_CHECKING:  # what the names are, for readers and type checkers; loaded lazily below
    from ddai.pipelines.store.objstore import GRACE_ENV
    from ddai.pipelines.store.partitions import (
        PartitionWriter,
        StoreConflict,
        arrow_dataset,
        check_remote,
        clean_leftovers,
        collect_garbage,
        collect_remote_garbage,
        collect_remote_side_garbage,
        commit_remote,
        dataset,
        read_rollouts,
        read_version,
        run_lock,
        side_parts,
        stored_keys,
        verify_partition,
        write_run,
    )
    from ddai.pipelines.store.stage import STAGE_DIR, Stage
    from ddai.pipelines.store.store_read import (
        LOCK_DIR,
        LOG_DIR,
        MANIFEST,
        QUARANTINE_DIR,
        SIDE_DIR,
        STATS_DIR,
        Snapshot,
        check_run_id,
        committed_files,
        files_digest,
        list_runs,
        manifest_version,
        parquet_files,
        partition_dir,
        partition_manifest,
        run_manifest,
        side_parts_record,
        snapshot,
    )


__getattr__, __dir__ = lazy_names(__name__, _HOME)
