"""``ddai curate bucket``'s config (its fields are the command's flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel.configs import (
    BUCKETS,
    Agg,
    DatasetFlag,
    Metric,
    RunsFlag,
    check_metric,
    file_name,
)
from ddai.pipelines.records.defaults import changed
from ddai.pipelines.records.rerun import ForceFlag


@dataclass(frozen=True)
class BucketConfig(DatasetFlag, RunsFlag, ForceFlag):
    """Flags of ``ddai curate bucket``. Exactly one score source: ``runs`` (with ``logs``) or
    ``scores`` (a table with ``id`` and ``score_col``; default: its one numeric column)."""

    out: Path
    """Folder for curriculum_bucket_{b,a,0}.parquet."""
    logs: Path | None = None
    scores: Path | None = None
    """Per-prompt score table (Parquet, CSV or JSONL with `id`)."""
    score_col: str | None = None
    """Score column of --scores; also the extra_info field the score is kept in (default: the
    table's one numeric column besides id; with --run: <metric>_<agg>)."""
    metric: Metric = Metric.NDCG
    """Rollout metric aggregated per prompt (format failures count 0)."""
    agg: Agg = Agg.MEAN
    """Aggregate over a prompt's rollouts."""
    mastered: float = 0.7
    """Bucket B (mastered): score above this."""
    floor: float = 0.1
    """Bucket 0 (unsolvable for now): score below this; A in between."""

    def __post_init__(self) -> None:
        if bool(self.runs) == bool(self.scores):
            raise ValueError(
                "give one score source: --logs DIR --run RUN (aggregate a run's rollouts) or "
                "--scores FILE --score-col COL (a table of per-prompt scores)"
            )
        if self.runs and self.logs is None:
            raise ValueError("--run needs the log store (--logs DIR)")
        if self.scores:  # the table's score is used as it is: nothing to aggregate
            for name in changed(self, ("metric", "agg")):
                raise ValueError(
                    f"--{name} aggregates a run's rollouts (--run); --scores gives each "
                    "prompt's score already: drop it, or pick the column with --score-col"
                )
        check_metric(self.metric, self.agg)
        for name in ("mastered", "floor"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ValueError(f"--{name} must be within [0, 1], got {v}")
        if self.floor > self.mastered:
            raise ValueError(f"--floor ({self.floor}) must not exceed --mastered ({self.mastered})")

    @property
    def column(self) -> str:
        """The ``extra_info`` field that carries the score."""
        return self.score_col or f"{self.metric}_{self.agg}"

    def outputs(self) -> dict[str, Path]:
        return {b: self.out / file_name(b) for b in BUCKETS}

    def params(self) -> dict[str, Any]:
        src = {"scores": "table"} if self.scores else {"scores": "log", "runs": list(self.runs)}
        return {
            **src,
            "metric": None if self.scores else self.metric,
            "agg": None if self.scores else self.agg,
            "score_col": self.column,
            "mastered": self.mastered,
            "floor": self.floor,
        }
