"""The configs of ``ddai analyze`` (their fields are its flags): a light module, so that its
``--help`` builds the flags without importing the analyses (DuckDB views, polars). ``attribution``
and ``export`` re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddai.pipelines.records.success import SUCCESS_THRESHOLD


@dataclass
class AttributionConfig:
    """Thresholds of the attribution (DDAI's round-2 analysis by default); the fields are the
    flags of ``ddai analyze attribution``."""

    score_max: float = 0.3
    """A prompt is low-scoring when its mean score (reward, else judge) is at or under this
    (DDAI's round-2 rule: 0.3)."""
    agree_min: int = 3
    """Rollouts that retrieved a golden page and agree on one answer the judge rejected, at least
    this many (and half of those rejected), flag the ground truth."""
    threshold: float = SUCCESS_THRESHOLD
    """Success = judge_score >= this and the format gate not failed."""
    flags: list[Path] = field(default_factory=list)
    """Review CSV (uid, verdict, reason: a person's decisions or a verifier's review.csv);
    wrong/uncertain rows flag the ground truth. Repeat for several."""
    truth: Path | None = None
    """A synthetic world's truth.json: also print precision and recall per class against its
    planted failure causes."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.score_max <= 1.0:
            raise ValueError(f"--score-max must be in [0, 1], got {self.score_max}")
        if self.agree_min < 2:
            raise ValueError(f"--agree-min must be >= 2 (an agreement), got {self.agree_min}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"--success-threshold must be in [0, 1], got {self.threshold}")
        self.flags = [Path(p) for p in self.flags]


@dataclass(frozen=True)
class RowsOut:
    """Where ``ddai analyze …`` writes its rows (the flags ``--out`` and ``--groups-out``)."""

    out: Path | None = None
    """Write the rows here (.csv, .parquet or .jsonl), atomically: one per prompt (attribution,
    drop-keep) or per run and step (latency)."""
    groups_out: Path | None = None
    """Write the zero-variance GRPO groups (run, step, uid, score) here (.csv, .parquet or
    .jsonl)."""
