"""Per-step training metrics kept beside the rollout log, so reports see what the optimizer did.

``TrainMetricsLog`` is a ``TrainerCallback`` (any transformers trainer takes one; GRPO's does):
every time the trainer logs (each ``logging_steps`` optimizer steps) it keeps the step's reward,
loss and clip ratios (TRL's ``clip_ratio/*``: the share of policy tokens, or of sequences under
GSPO, whose ratio left the clip range) and appends them to
``<logs>/_side/train_metrics/<run>.jsonl`` through the run's one writer (``RolloutLog``'s side
table: under the run's write lock, listed with its hash in the run's manifest; bytes already
written are never rewritten). ``ddai report`` reads that side table for its training section; the
run's summary reports the mean clip ratio. On a log store on object storage each step's row is
put as one new part object listed in the manifest (``ddai.pipelines.store.side_log``): no step puts
the table again.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Protocol

from transformers import TrainerCallback

from ddai.pipelines.store.side_log import SideLog, side_path

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
    return side_path(logs, TABLE, run_id)


class RunWriter(Protocol):
    """The run's one writer of the log store (GRPO's ``episode.logrows.RolloutLog``): the side
    table goes through it, so its parts are listed in the run's manifest by the run's commits."""

    def side_table(self, table: str) -> SideLog: ...


class TrainMetricsLog(TrainerCallback):
    """Keeps the logged training metrics per step; writes them to the log store when given one,
    through the run's one writer (``writer``: the run's ``RolloutLog``; without one, the side table
    is opened on its own, as a ``RolloutLog`` built for it would)."""

    def __init__(
        self,
        logs: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        *,
        writer: RunWriter | None = None,
    ):
        self.logs = logs
        self.path = side_table_path(logs, run_id) if logs is not None and run_id else None
        self.run_id = run_id
        self._table = None
        self.rows: list[dict[str, Any]] = []
        self._mine = 0
        if self.path is not None:
            assert logs is not None and run_id is not None
            # A resumed run keeps the steps before its checkpoint (later ones are replaced).
            self._table = (
                writer.side_table(TABLE)
                if writer is not None
                else SideLog.open(Path(logs), run_id, TABLE)
            )
            self.rows = list(self._table.rows)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        row = {new: float(logs[old]) for old, new in KEPT.items() if _number(logs.get(old))}
        if not row:
            return
        step = int(state.global_step)
        new = {"run_id": self.run_id, "step": step, **row}
        # Rows from an earlier attempt at this step or later (a resume, a rerun) give way; this
        # run's own rows never do (a step logged twice keeps both).
        earlier = self.rows[: len(self.rows) - self._mine]
        keep = None
        if any(r["step"] >= step for r in earlier):
            keep = [r for r in earlier if r["step"] < step] + self.rows[len(earlier) :]
            self.rows = list(keep)
        self.rows.append(new)
        self._mine += 1
        if self._table is not None:
            self._table.append(new, keep=keep)

    def mean(self, column: str) -> float | None:
        """Mean of ``column`` over the logged steps that have it (None when none does)."""
        vals = [r[column] for r in self.rows if column in r]
        return sum(vals) / len(vals) if vals else None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
