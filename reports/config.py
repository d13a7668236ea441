"""What `ddai report` builds: one dataclass, validated up front so a bad flag fails before any work."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddai.pipelines.records.schema import SUCCESS_THRESHOLD


@dataclass
class ReportConfig:
    """Inputs and thresholds of one HTML report.

    Attributes:
        logs: log store folder (hive-partitioned Parquet).
        out: the HTML file to write (atomically).
        runs: run ids to read; None reads every run in the store.
        success_threshold: a rollout succeeds when judge_score >= this and format_ok is not false
            (DESIGN.md's success, default 1.0).
        judge_high: judge >= this counts as a correct answer (discrepancies, hallucination
            suspects); DDAI's analyses used 0.5.
        ndcg_low: NDCG <= this counts as "no golden page retrieved" (DDAI: = 0).
        judge_low: judge <= this counts as a wrong answer (DDAI: = 0).
        ndcg_high: NDCG >= this counts as "retrieval succeeded" (DDAI: = 1).
        compare: two run ids for the run-comparison section (A is the baseline, B the new run).
        datasets: curated dataset files whose manifests draw the funnel Sankey.
        datasets_dir: a folder scanned for curated datasets (files with a ``.manifest.json``).
        max_turns: the turn budget; None reads each rollout's ``extra.max_turns``.
        browse_max: most rollouts shipped to the trajectory browser (a stratified sample).
        text_max: longest text (think, observation, answer) shown per field before it is cut.
        top: rows in ranked lists (hallucination suspects, per-prompt deltas).
        seed: sampling seed of the trajectory browser.
        title: page title; default names the runs.
        progress: show a progress bar while building.
        threads: DuckDB threads for the report's queries. Default: DuckDB's own (one per core).
        flags: review CSVs (``uid, verdict, reason``) whose wrong/uncertain rows flag a prompt's
            ground truth in the failure attribution.
        value_sft: ``ddai train value-sft`` output folders whose per-token TD weights (mean, clip
            shares) the value section shows.
    """

    logs: Path
    out: Path
    runs: list[str] | None = None
    success_threshold: float = SUCCESS_THRESHOLD
    judge_high: float = 0.5
    ndcg_low: float = 0.0
    judge_low: float = 0.0
    ndcg_high: float = 1.0
    compare: tuple[str, str] | None = None
    datasets: list[Path] = field(default_factory=list)
    datasets_dir: Path | None = None
    max_turns: int | None = None
    browse_max: int = 500
    text_max: int = 2_000
    top: int = 25
    seed: int = 0
    title: str | None = None
    progress: bool = True
    threads: int | None = None
    flags: list[Path] = field(default_factory=list)
    value_sft: list[Path] = field(default_factory=list)

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
