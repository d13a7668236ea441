"""Run metrics for ddai's own training loops (PPO, value head, joint stage): one JSON row per
logged step in ``<out>/metrics.jsonl``, and the device a single-process loop trains on. The
TRL-based rooms log through ``metrics_file.MetricsFileCallback`` instead."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Metric rows appended to a JSONL file (started afresh per run), one per logged step."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {
            "step": step,
            **{
                k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in metrics.items()
            },
        }
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
