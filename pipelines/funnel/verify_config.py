"""``ddai curate verify-gt``'s config (its fields are the command's flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel.configs import ALL, RULES, DatasetFlag, DecisionsFlag, RunsFlag
from ddai.pipelines.records.defaults import changed
from ddai.pipelines.records.rerun import ForceFlag


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
        # a threshold no selected rule reads would be accepted and ignored
        if not self.runs and changed(self, ["ndcg_min"]):
            raise ValueError(
                "--ndcg-min is a threshold of the candidate rules, which read a run's scores: "
                "add --logs DIR --run RUN"
            )
        if changed(self, ["low_score_max"]) and "low-score" not in self.rules:
            raise ValueError(
                "--low-score-max is a threshold of the low-score rule: add --run RUN (and "
                "--select low-score when selecting rules)"
            )
        if self.runs and self.logs is None:
            raise ValueError("--run needs the log store (--logs DIR)")
        if self.decisions and self.trust_verifier:
            raise ValueError(
                "choose one: --decisions CSV (a person's review) or --trust-verifier (accept "
                "the verifier's proposals); to accept the proposals a review sheet records, "
                "rerun with --trust-verifier --corpus and without --decisions (the call cache "
                "answers what was asked before)"
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
