"""Read back the metrics files ``MetricsFileCallback`` writes (tests only: the package writes
them, and TensorBoard or a notebook reads them)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from ddai.pipelines.records import csv_cells


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a metrics file written by ``MetricsFileCallback`` (JSONL, or CSV with its header
    and cells unescaped)."""
    p = Path(path)
    if p.suffix == ".csv":
        with p.open(encoding="utf-8", newline="") as fh:
            return [
                {
                    csv_cells.unescape(k): csv_cells.unescape(v) if isinstance(v, str) else v
                    for k, v in r.items()
                }
                for r in csv.DictReader(fh)
            ]
    return [json.loads(line) for line in p.read_text("utf-8").splitlines() if line.strip()]
