"""The funnel steps' configs (their fields are the flags of ``ddai curate``), and the constants
their checks and help read: a light module, so that ``ddai curate … --help`` builds its flags
without importing the steps (their DuckDB, Arrow and backend imports). Each step module
re-exports its config and finds its input files itself (`_inputs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ddai.pipelines.records.rerun import ForceFlag
from ddai.pipelines.records.success import SUCCESS_THRESHOLD

# bucket
BUCKETS = ("b", "a", "0")


class Metric(StrEnum):
    """The rollout metric bucket aggregates (a flag's choices: Typer lists and checks them)."""

    NDCG = "ndcg"
    JUDGE = "judge"
    REWARD = "reward"


class Agg(StrEnum):
    MEAN = "mean"
    MAX = "max"


METRICS: tuple[str, ...] = tuple(m.value for m in Metric)
AGGS: tuple[str, ...] = tuple(a.value for a in Agg)
# focus
STEP_ROUND1 = "curate.focus.round1"
STEP_NEXT = "curate.focus.next"
# verify-gt
RULES = ("zero-score", "low-score", "low-ndcg")  # ``VerifyConfig.select``'s help says each
ALL = "all"  # the rule every prompt matches when no run is given
# plan


class Prior(StrEnum):
    EMPIRICAL = "empirical"
    JEFFREYS = "jeffreys"
    NONE = "none"


PRIORS: tuple[str, ...] = tuple(p.value for p in Prior)
DEFAULT_N_AGENT = (4, 8, 16, 32)


def check_metric(metric: str, agg: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not known; use one of {', '.join(METRICS)}")
    if agg not in AGGS:
        raise ValueError(f"aggregate {agg!r} is not known; use one of {', '.join(AGGS)}")


def file_name(bucket: str) -> str:
    """DDAI's file names: ``curriculum_bucket_{b,a,0}.parquet``."""
    return f"curriculum_bucket_{bucket}.parquet"


@dataclass(frozen=True, kw_only=True)
class RunsFlag:
    """The rollouts a funnel step reads (keyword-only, so the steps' own fields keep their
    order); the log store is ``logs`` of each step."""

    runs: list[str] = field(default_factory=list)
    """Run whose rollouts score the prompts; repeat to pool several runs. Each run must carry the
    score read (bucket: --metric; focus: reward; verify-gt: reward and NDCG; plan: judge)."""


@dataclass(frozen=True, kw_only=True)
class DatasetFlag:
    """The prompt set bucket and verify-gt read."""

    dataset: Path
    """The prompt set (Parquet with an `id` column)."""


@dataclass(frozen=True, kw_only=True)
class DecisionsFlag:
    """A person's review, read by verify-gt and focus."""

    decisions: list[Path] = field(default_factory=list)
    """A person's review CSV (uid, verdict, reason; verdict ok, wrong or uncertain). Repeatable;
    a later file's decision on a uid wins."""


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


@dataclass(frozen=True)
class VerifyConfig(DatasetFlag, RunsFlag, DecisionsFlag, ForceFlag):
    """Flags of ``ddai curate verify-gt``."""

    out: Path
    """Folder for <dataset>_filtered.parquet, <dataset>_excluded.parquet, review.csv and
    review.html."""
    logs: Path | None = None
    select: list[str] = field(default_factory=list)
    """Candidate rule (repeatable; default with --run: all three): zero-score: mean score = 0
    with mean NDCG >= ndcg-min (page found, answer never counted); low-score: 0 < mean score <=
    low-score-max with mean NDCG >= ndcg-min; low-ndcg: mean NDCG < ndcg-min (the reference page
    is rarely found). Without --run every prompt is a candidate."""
    ndcg_min: float = 0.5
    """NDCG threshold of the candidate rules."""
    low_score_max: float = 0.3
    """Upper score bound of the low-score rule."""
    verifier: str | None = None
    """GT verifier backend (ddai.toml [backends.NAME]; default: $DDAI_VERIFIER, [roles]
    verifier, else local). Asked about undecided candidates unless only --decisions is given."""
    corpus: Path | None = None
    """Page corpus (pages.parquet) the verifier reads: page text, and page images from an image
    corpus (`ddai corpus build`)."""
    trust_verifier: bool = False
    """Exclude on the verifier's proposals (wrong or uncertain) without a person."""
    dry_run: bool = False
    """Count the verifier calls and their estimated cost; call nothing."""
    max_cost: float | None = None
    """Stop calling before spending more than this many USD (resumable)."""
    skip_preflight: bool = False
    """Ask the verifier even about candidates whose reference pages the corpus lacks (by default
    that exits 2 before any call, naming the pages). Recorded in the summary and the output's
    manifest."""
    retry_failed: bool = False  # call again what failed before; reruns the step
    progress: bool = True
    """Show the verifier backend's progress bar (on stderr)."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.select if r not in RULES]
        if unknown:
            raise ValueError(
                f"unknown --select rule(s) {', '.join(unknown)}; known: {', '.join(RULES)}"
            )
        if self.select and not self.runs:
            raise ValueError("--select rules read a run's scores: add --logs DIR --run RUN")
        if self.runs and self.logs is None:
            raise ValueError("--run needs the log store (--logs DIR)")
        if self.decisions and self.trust_verifier:
            raise ValueError(
                "choose one: --decisions CSV (a person's review) or --trust-verifier (accept "
                "the verifier's proposals)"
            )
        if self.uses_verifier and self.corpus is None:
            raise ValueError(
                "the verifier reads the reference page text: pass --corpus pages.parquet, or "
                "--decisions CSV to apply a person's review without asking a verifier"
            )
        for name in ("ndcg_min", "low_score_max"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"--{name.replace('_', '-')} must be a number")

    @property
    def uses_verifier(self) -> bool:
        """Ask the verifier unless a person's decisions are given and no verifier is named."""
        return self.trust_verifier or self.verifier is not None or not self.decisions

    @property
    def rules(self) -> tuple[str, ...]:
        if not self.runs:
            return (ALL,)
        return self.select or RULES

    def outputs(self) -> dict[str, Path]:
        stem = Path(self.dataset).stem
        return {
            "filtered": self.out / f"{stem}_filtered.parquet",
            "excluded": self.out / f"{stem}_excluded.parquet",
            "review.csv": self.out / "review.csv",
            "review.html": self.out / "review.html",
        }

    def params(self, verifier: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "runs": list(self.runs),
            "rules": list(self.rules),
            "ndcg_min": self.ndcg_min,
            "low_score_max": self.low_score_max,
            "verifier": verifier,
            "trust_verifier": self.trust_verifier,
        }


@dataclass(frozen=True)
class PlanConfig(RunsFlag):
    """Flags of ``ddai curate plan``."""

    logs: Path
    n_agent: list[int] = field(default_factory=lambda: list(DEFAULT_N_AGENT))
    """Proposed rollouts per prompt; repeatable."""
    max_turns: int = 7
    """Turn limit per rollout (bounds the policy's turn budget)."""
    target: float = 0.5
    """Wanted share of GRPO groups with mixed outcomes (learning signal)."""
    prior: Prior = Prior.EMPIRICAL
    """Shrinkage of per-prompt success rates: empirical (Beta fitted per bucket), jeffreys
    (Beta(1/2, 1/2)) or none (plug-in s/m)."""
    success_threshold: float = SUCCESS_THRESHOLD
    price_per_call: float | None = None
    """USD per generator or judge call (default: $DDAI_PRICE_PER_CALL, ddai.toml [plan]
    price_per_call; none set: the cost is shown as unknown, not 0)."""
    buckets: list[Path] = field(default_factory=list)
    """A dataset whose ids form one bucket (named by its file stem); repeatable. Default: buckets
    B / A / 0 by the run's mean NDCG."""
    out: Path | None = None
    """Also write the plan as JSON to this file."""
    mastered: float = 0.7
    floor: float = 0.1

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("name the run whose success rates to plan from with --run RUN")
        bad = [n for n in self.n_agent if n < 1]
        if not self.n_agent or bad:
            raise ValueError(f"--n-agent values must be >= 1, got {list(self.n_agent)}")
        if self.max_turns < 1:
            raise ValueError(f"--max-turns must be >= 1, got {self.max_turns}")
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"--target must be in (0, 1], got {self.target}")
        if self.prior not in PRIORS:
            raise ValueError(f"--prior {self.prior!r} is not known; use one of {', '.join(PRIORS)}")
        if self.price_per_call is not None and self.price_per_call < 0:
            raise ValueError(f"--price-per-call must be >= 0, got {self.price_per_call}")


@dataclass(frozen=True)
class LineageConfig:
    """Flags of ``ddai lineage``: the files whose manifests are walked back to the raw logs."""

    files: list[Path]
    """Funnel output file(s) to trace."""
    check: bool = False
    """Re-hash every input and mark the ones changed since they were used; re-hash every output
    and log partition against its manifest and exit 1 when one differs (an interrupted write or
    an edit)."""
