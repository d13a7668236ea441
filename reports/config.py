"""What `ddai report` builds: one dataclass, validated up front so a bad flag fails before any work."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddai.pipelines.records.schema import SUCCESS_THRESHOLD


@dataclass
class ReportConfig:
    """Inputs and thresholds of one HTML report; the fields are the flags of ``ddai report``."""

    logs: Path
    """Log store folder (hive-partitioned Parquet)."""
    out: Path
    """HTML file to write. Default: <workspace>/report.html."""
    runs: list[str] | None = None
    """Run ids to read; None reads every run in the store."""
    success_threshold: float = SUCCESS_THRESHOLD
    """The success rule's threshold on judge_score (the flag: the commands' shared
    ``--success-threshold``)."""
    judge_high: float = 0.5
    """Judge score at or above which an answer counts as correct (discrepancies, hallucination
    suspects)."""
    ndcg_low: float = 0.0
    """NDCG at or below which retrieval counts as failed."""
    judge_low: float = 0.0
    """Judge score at or below which an answer counts as wrong."""
    ndcg_high: float = 1.0
    """NDCG at or above which retrieval counts as succeeded."""
    compare: tuple[str, str] | None = None
    """Compare two runs, given as --compare A --compare B (A the baseline, B the new one;
    --compare A B also works): behaviour shift, per-prompt deltas, distributions side by side."""
    datasets: list[Path] = field(default_factory=list)
    """Curated dataset file (a ddai curate output) whose manifests draw the funnel Sankey; repeat
    for several."""
    datasets_dir: Path | None = None
    """Folder scanned for curated datasets (files with a manifest)."""
    max_turns: int | None = None
    """Turn budget of the runs. Default: each rollout's extra.max_turns."""
    browse_max: int = 500
    """Most rollouts in the trajectory browser (a sample covering every run, outcome and class),
    shipped compressed: bounds the file size (5,000 add about 1 MB)."""
    text_max: int = 2_000
    """Characters shown per think, observation or answer before a cut."""
    top: int = 25
    """Rows in ranked lists (suspects, better/worse prompts)."""
    seed: int = 0
    """Seed of the browser's sample."""
    title: str | None = None
    """Page title. Default: the runs' names."""
    progress: bool = True
    """Show a progress bar while building."""
    threads: int | None = None
    """DuckDB threads for the report's queries, and sections built at once. Default: one per
    core."""
    flags: list[Path] = field(default_factory=list)
    """Review CSV (uid, verdict, reason) whose wrong/uncertain rows flag a prompt's ground truth
    in the failure attribution; repeat for several."""
    value_sft: list[Path] = field(default_factory=list)
    """Output folder of `ddai train value-sft` (repeatable): the value section shows its
    per-token TD weights (mean, shares at the clip bounds) per step."""

    def __post_init__(self) -> None:
        self.logs = Path(self.logs)
        self.out = Path(self.out)
        self.datasets = [Path(p) for p in self.datasets]
        self.flags = [Path(p) for p in self.flags]
        self.value_sft = [Path(p) for p in self.value_sft]
        for name in ("success_threshold", "judge_high", "ndcg_low", "judge_low", "ndcg_high"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be in [0, 1], got {v}")
        if self.judge_low >= self.judge_high:  # else a rollout could be right and wrong at once
            raise ValueError(
                f"--judge-low ({self.judge_low}) must be below --judge-high ({self.judge_high})"
            )
        if self.compare is not None:
            self.compare = tuple(self.compare)  # type: ignore[assignment]
            if len(self.compare) != 2 or self.compare[0] == self.compare[1]:
                raise ValueError(
                    "--compare takes two different run ids: --compare RUN_A --compare RUN_B"
                )
            if self.runs and not set(self.compare) <= set(self.runs):
                missing = sorted(set(self.compare) - set(self.runs))
                raise ValueError(
                    f"--compare run(s) {', '.join(missing)} are not among --run; add them with "
                    "--run or drop --run to read every run"
                )
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"--max-turns must be >= 1, got {self.max_turns}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {self.threads}")
        for name in ("browse_max", "text_max", "top"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        if self.out.suffix.lower() not in (".html", ".htm"):
            raise ValueError(f"--out {self.out} should end in .html (the report is one HTML file)")

    def sql_params(self) -> dict[str, object]:
        """Every parameter the report's SQL may bind; each query takes the ones it names."""
        return {
            "threshold": self.success_threshold,
            "judge_high": self.judge_high,
            "ndcg_low": self.ndcg_low,
            "judge_low": self.judge_low,
            "ndcg_high": self.ndcg_high,
            "max_turns": self.max_turns,
            "seed": self.seed,
            "top": self.top,
            "browse_max": self.browse_max,
        }
