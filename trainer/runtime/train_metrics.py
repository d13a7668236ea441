"""Per-step training metrics kept beside the rollout log, so reports see what the optimizer did.

``TrainMetricsLog`` is a ``TrainerCallback``: every time the trainer logs (each ``logging_steps``
optimizer steps) it keeps the step's reward, loss and clip ratios (TRL's ``clip_ratio/*``: the
share of policy tokens, or of sequences under GSPO, whose ratio left the clip range) and rewrites
``<logs>/_side/train_metrics/<run>.jsonl`` atomically, holding the run's write lock like every
writer of the store (a temp file left by a killed run is removed by the next write). ``ddai report`` reads that side table for
its training section; the run's summary reports the mean clip ratio. On a log store on object
storage the table is put whole as one object (a PUT is atomic; one trainer writes a run).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ddai.pipelines import io, objstore, store

TABLE = "train_metrics"
# Keys kept from the trainer's logs: name in the log → column in the side table.
KEPT = {
    "reward": "reward",
    "reward_std": "reward_std",
    "loss": "loss",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "clip_ratio/region_mean": "clip_ratio",
    "clip_ratio/low_mean": "clip_ratio_low",
    "clip_ratio/high_mean": "clip_ratio_high",
    "learning_rate": "learning_rate",
}


def side_table_path(logs: str | os.PathLike[str], run_id: str) -> Path:
    return Path(logs) / "_side" / TABLE / f"{run_id}.jsonl"


class TrainMetricsLog(TrainerCallback):
    """Keeps the logged training metrics per step; writes them to the log store when given one."""

    def __init__(self, logs: str | os.PathLike[str] | None = None, run_id: str | None = None):
        self.logs = logs
        self.path = side_table_path(logs, run_id) if logs is not None and run_id else None
        self.run_id = run_id
        self.rows: list[dict[str, Any]] = []
        self._mine: list[dict[str, Any]] = []
        if self.path is not None and objstore.any_isfile(self.path):
            # A resumed run keeps the steps before its checkpoint (later ones are replaced).
            text = objstore.any_read_text(self.path)
            self.rows = [json.loads(line) for line in text.splitlines() if line.strip()]

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        row = {new: float(logs[old]) for old, new in KEPT.items() if _number(logs.get(old))}
        if not row:
            return
        step = int(state.global_step)
        # Rows from an earlier attempt at this step or later (a resume, a rerun) give way.
        mine = {id(r) for r in self._mine}
        self.rows = [r for r in self.rows if r["step"] < step or id(r) in mine]
        new = {"run_id": self.run_id, "step": step, **row}
        self.rows.append(new)
        self._mine.append(new)
        if self.path is not None:
            self._write()

    def _write(self) -> None:
        assert self.path is not None and self.logs is not None and self.run_id is not None
        with store.run_lock(self.logs, self.run_id):  # object storage: no lock, one atomic put
            io.write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))

    def mean(self, column: str) -> float | None:
        """Mean of ``column`` over the logged steps that have it (None when none does)."""
        vals = [r[column] for r in self.rows if column in r]
        return sum(vals) / len(vals) if vals else None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
