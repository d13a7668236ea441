"""A ``TrainerCallback`` that appends every logged metric dict to a JSONL or CSV file.

This is the default metric sink (``report_to`` may add TensorBoard and other integrations). Keys
stay as the trainer logs them (TRL's ``reward``, ``rewards/<func>/mean``, ``loss`` …) plus ``step``
and ``epoch``; the CSV header is rewritten when new keys appear, so no value is ever dropped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ddai.pipelines.records import csv_cells


class MetricsFileCallback(TrainerCallback):
    def __init__(self, path: str | os.PathLike[str], kind: str = "jsonl") -> None:
        if kind not in ("jsonl", "csv"):
            raise ValueError(f"metrics file kind must be jsonl or csv, got {kind!r}")
        self.path = Path(path)
        self.kind = kind
        self._rows: list[dict[str, Any]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        scalars = {
            k: v for k, v in logs.items() if isinstance(v, int | float | str | bool) or v is None
        }
        row = {"step": state.global_step, "epoch": state.epoch, **scalars}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.kind == "jsonl":
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
            return
        self._rows.append(row)
        keys = list(dict.fromkeys(k for r in self._rows for k in r))
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            # a logged string (a note, a sample) is text a spreadsheet could run: escaped
            csv_cells.write_rows(fh, keys, ([r.get(k) for k in keys] for r in self._rows))
        os.replace(tmp, self.path)


def build_callbacks(
    output_dir: str | os.PathLike[str], metrics_file: str | None, *, progress: bool = True
) -> list[Any]:
    """TRL's rich progress display (unless ``progress`` is off), plus a metrics file writer when
    asked for."""
    from trl import RichProgressCallback

    # TRL's rich display ignores ``disable_tqdm`` and draws on stdout, where ``--json`` prints.
    callbacks: list[Any] = [RichProgressCallback()] if progress else []
    if metrics_file:
        callbacks.append(
            MetricsFileCallback(Path(output_dir) / f"metrics.{metrics_file}", metrics_file)
        )
    return callbacks
