"""``ddai curate focus``'s config (its fields are the command's flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel.configs import STEP_NEXT, STEP_ROUND1, DecisionsFlag, RunsFlag
from ddai.pipelines.records.defaults import changed
from ddai.pipelines.records.rerun import ForceFlag


@dataclass(frozen=True)
class FocusConfig(RunsFlag, DecisionsFlag, ForceFlag):
    """Flags of ``ddai curate focus``: round 1 (``bucket_a`` and ``bucket_0``) or round N+1
    (``prev``), each scored by the mean ``reward`` of ``runs`` in ``logs``."""

    out: Path
    """The next round's dataset (Parquet)."""
    logs: Path
    bucket_a: Path | None = None
    """Round 1: bucket A (curriculum_bucket_a.parquet)."""
    bucket_0: Path | None = None
    """Round 1: the verified bucket 0 (curriculum_bucket_0_filtered.parquet)."""
    hard_max: float = 0.2
    """Round 1: keep bucket-A prompts whose mean reward is at or under this."""
    prev: Path | None = None
    """Round N+1: the previous round's dataset."""
    score_max: float = 0.3
    """Round N+1: keep prompts whose mean reward in the run is at or under this."""

    def __post_init__(self) -> None:
        round1 = self.bucket_a is not None or self.bucket_0 is not None
        if round1 == (self.prev is not None):
            raise ValueError(
                "choose one: round 1 (--bucket-a FILE --bucket-0 FILE) or round N+1 (--prev FILE)"
            )
        if round1 and (self.bucket_a is None or self.bucket_0 is None):
            raise ValueError("round 1 needs both --bucket-a FILE and --bucket-0 FILE")
        if round1 and self.decisions:
            raise ValueError(
                "--decisions applies to round N+1; verify bucket 0 with `ddai curate verify-gt` "
                "and pass its *_filtered.parquet as --bucket-0"
            )
        if not self.runs:
            raise ValueError("name the run that scored these prompts with --run RUN")
        # each round reads one threshold: the other one, given, would be accepted and ignored
        other = ("score_max", "round N+1 (--prev)") if round1 else ("hard_max", "round 1")
        if changed(self, [other[0]]):
            flag = f"--{other[0].replace('_', '-')}"
            keep = "--hard-max" if round1 else "--score-max"
            raise ValueError(f"{flag} applies to {other[1]}; this round keeps prompts by {keep}")
        for name in ("hard_max", "score_max"):
            v = getattr(self, name)
            if not math.isfinite(v):
                raise ValueError(f"--{name.replace('_', '-')} must be a number, got {v}")

    @property
    def round1(self) -> bool:
        return self.prev is None

    @property
    def step(self) -> str:
        return STEP_ROUND1 if self.round1 else STEP_NEXT

    def params(self) -> dict[str, Any]:
        common = {"runs": list(self.runs), "score": "reward_mean"}
        if self.round1:
            return {**common, "hard_max": self.hard_max}
        return {**common, "score_max": self.score_max}
