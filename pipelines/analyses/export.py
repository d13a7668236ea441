"""Prompt lists written atomically in the format the file name asks for (CSV, Parquet, JSONL).

A CSV's text cells are escaped for spreadsheets (``csv_cells``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.store import io

pl = lazy_module("polars")

FORMATS = (".csv", ".parquet", ".jsonl")


@dataclass(frozen=True)
class RowsOut:
    """Where ``ddai analyze …`` writes its rows (the flags ``--out`` and ``--groups-out``)."""

    out: Path | None = None
    """Write the per-prompt rows here (.csv, .parquet or .jsonl), atomically."""
    groups_out: Path | None = None
    """Write the zero-variance GRPO groups (run, step, uid, score) here (.csv, .parquet or
    .jsonl)."""


def write_rows(path: str | os.PathLike[str], df: pl.DataFrame) -> Path:
    """Write ``df`` to ``path`` by its suffix (.csv, .parquet, .jsonl); returns the path."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--out {out}: use a file ending in {', '.join(FORMATS)}")
    with io.atomic_path(out) as tmp:
        if suffix == ".csv":
            csv_cells.write_frame(df, tmp)  # uids, questions, answers: untrusted text
        elif suffix == ".parquet":
            df.write_parquet(tmp, compression="zstd")
        else:
            df.write_ndjson(tmp)
    return out
