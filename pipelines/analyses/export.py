"""Prompt lists written atomically in the format the file name asks for (CSV, Parquet, JSONL),
each with its step manifest, so ``ddai lineage`` walks from the file to the runs it was read from.

A CSV's text cells are escaped for spreadsheets (``csv_cells``). The outputs of one invocation
in one folder (``drop-keep --out --groups-out``) are committed as one set
(``manifest.commit_set``): both files and manifests, or neither.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.analyses.configs import RowsOut  # noqa: F401 (re-exported)
from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.deps import pl
from ddai.pipelines.store import fileset, manifest, objstore

FORMATS = (".csv", ".parquet", ".jsonl")


def check_suffix(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``path`` as a Path; ValueError naming ``flag`` when its suffix is not a row format."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise ValueError(f"{flag} {out}: use a file ending in {', '.join(FORMATS)}")
    return out


def _write(df: pl.DataFrame, suffix: str, tmp: Path) -> None:
    if suffix == ".csv":
        csv_cells.write_frame(df, tmp)  # uids, questions, answers: untrusted text
    elif suffix == ".parquet":
        df.write_parquet(tmp, compression="zstd")
    else:
        df.write_ndjson(tmp)


def run_inputs(logs: str | os.PathLike[str], runs: Sequence[str]) -> tuple[list[dict], int]:
    """The input records of ``runs``' log partitions (as the funnel's steps record them, so
    lineage walks on to each run's raw log) and their rollouts in all."""
    records, rollouts = [], 0
    for run in runs:
        part = store.partition_dir(logs, run)
        part = part if objstore.is_url(part) else part.resolve()
        records.append(manifest.input_record(part))
        m = store.partition_manifest(part) or {}
        rollouts += int(m.get("rollouts_total") or m.get("rollouts_out") or 0)
    return records, rollouts


def commit_rows(
    step: str,
    params: Mapping[str, Any],
    inputs: list[dict[str, Any]],
    rows_in: int,
    outputs: Mapping[str, tuple[Path, pl.DataFrame]],
    summary: Mapping[str, Any],
) -> dict[str, Path]:
    """Write each ``label: (path, rows)`` by its suffix with its manifest (``step``, ``params``,
    the ``inputs``' records, ``rows_in`` read, its rows out, the command's ``summary`` in its
    notes); outputs sharing a folder are one set. Returns label → path."""
    paths = {
        label: check_suffix(p, f"--{label.replace(' ', '-')}") for label, (p, _) in outputs.items()
    }
    base = manifest.start(step, dict(params), [], records=inputs)
    base.rows_in = rows_in
    base.notes = {"summary": dict(summary)}
    by_folder: dict[str, list[manifest.Member]] = {}
    named: dict[Path, str] = {}
    for label, (_, df) in outputs.items():
        # a URL stays one (pathlib's resolve would make ``s3:/b/k`` a folder `s3:` in the cwd)
        path = (
            paths[label] if objstore.is_url(paths[label]) else paths[label].expanduser().resolve()
        )
        if (other := named.setdefault(path, label)) != label:
            flags = " and ".join(f"--{x.replace(' ', '-')}" for x in (other, label))
            raise ValueError(f"{flags} both name {paths[label]}: give each its own file")
        record = dataclasses.replace(base, rows_out=df.height)
        write = lambda tmp, d=df, s=path.suffix.lower(): _write(d, s, tmp)  # noqa: E731
        member = manifest.Member(path, write, record)
        by_folder.setdefault(fileset.folder_of(path), []).append(member)
    for members in by_folder.values():
        manifest.commit_set(members)
    return paths
