"""What the funnel steps' configs share: the constants their checks and help read and the flag
groups several steps take (``RunsFlag``, ``DatasetFlag``, ``DecisionsFlag``). Each step's config is
in its own light module (``bucket_config``, ``focus_config``, ``verify_config``, ``plan_config``,
``lineage_config``), so ``ddai curate X --help`` builds X's flags alone, without importing the
steps (their DuckDB, Arrow and backend imports) or the other steps' configs (~1 ms a frozen
dataclass). Each step module re-exports its config and finds its input files itself (`_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

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
