"""Prompt lists written atomically in the format the file name asks for (CSV, Parquet, JSONL).

A CSV's text cells are escaped for spreadsheets (``csv_cells``)."""

from __future__ import annotations

import os
from pathlib import Path

from ddai.pipelines.analyses.configs import RowsOut  # noqa: F401 (re-exported)
from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.deps import pl
from ddai.pipelines.store import io

FORMATS = (".csv", ".parquet", ".jsonl")


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
