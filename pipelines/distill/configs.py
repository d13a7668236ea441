"""The distill steps' configs (their fields are the flags of ``ddai distill``, ``distill check``,
``distill convert`` and ``distill vet``) and the names their checks and help read: a light module,
so that ``ddai distill … --help`` builds its flags without importing the steps (their rich
progress, store writers, backends and Arrow). Each step module re-exports its config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from ddai.pipelines.distill.rules import ClaimRules
from ddai.pipelines.distill.select_config import Rank, SelectConfig
from ddai.pipelines.records.success import SUCCESS_THRESHOLD
from ddai.pipelines.store import workspace

REPORT_SUFFIX = ".report.jsonl"
"""The drop report beside an SFT file (``distill``, ``distill check``, ``distill vet``)."""


def report_path(output: str | os.PathLike[str]) -> Path:
    return Path(f"{output}{REPORT_SUFFIX}")


# ---------------------------------------------------------------- the SFT file's shapes


class Format(StrEnum):
    """An SFT file's shape (a flag's choices)."""

    TRAIN1 = "train1"
    MESSAGES = "messages"


FORMATS: tuple[str, ...] = tuple(f.value for f in Format)


# ---------------------------------------------------------------- distill


@dataclass(frozen=True)
class Drops:
    """Which optional drops apply."""

    forced: bool = False
    system_errors: bool = False
    repeated_queries: bool = False
    max_system_errors: int | None = None
    """Drop samples with more user messages holding ``[System Error:`` than this (DDAI's
    ``build_train1_sft_dataset.py --max-system-errors``); None: no cap."""


@dataclass(frozen=True)
class Chunking:
    """At most ``max_thinks`` thinks and about ``max_chars`` characters per request (a single
    longer think still goes alone)."""

    max_thinks: int = 8
    max_chars: int = 12_000

    def __post_init__(self) -> None:
        if self.max_thinks < 1 or self.max_chars < 1:
            raise ValueError(
                f"chunking needs max_thinks >= 1 and max_chars >= 1, got {self.max_thinks}, "
                f"{self.max_chars}"
            )


class RewriteMode(StrEnum):
    """What goes through the rewriter (a flag's choices)."""

    THINK_ONLY = "think-only"
    NONE = "none"


REWRITE_MODES: tuple[str, ...] = tuple(m.value for m in RewriteMode)


class DistillError(RuntimeError):
    """The step ran but could not finish (e.g. stopped by ``--max-cost``); exit code 1."""


@dataclass
class DistillConfig:
    """One ``ddai distill`` run; each field is a flag (its docstring the flag's help; the
    post-pass drops are also ``ddai distill check``'s flags)."""

    logs: Path
    """The log store."""
    runs: list[str]
    """Run id to distill (required; repeat to pool several runs). Each run needs parsed turns."""
    out: Path
    """The SFT Parquet file to write (required)."""
    success_rate_max: float = 0.5
    """Keep prompts whose success rate is > 0 and <= this."""
    top_k: int = 4
    """Successful rollouts kept per prompt, best first (see --rank)."""
    rank: Rank = Rank.DDAI
    """ddai: DDAI's finalize order (NDCG desc, fewer searches, fewer bboxes, shorter assistant
    text, then log order); reward: reward desc, NDCG desc, fewer actions, rollout_idx."""
    success_threshold: float = SUCCESS_THRESHOLD
    """The success rule's threshold on judge_score (the flag: the commands' shared
    ``--success-threshold``)."""
    rewrite: RewriteMode = RewriteMode.THINK_ONLY
    """think-only: rewrite thinks only; none: no rewriter."""
    rewriter: str | None = None
    """Rewriter backend name (ddai.toml [backends.NAME]). Default: $DDAI_REWRITER, ddai.toml
    [roles] rewriter, else identity (no model)."""
    fmt: Format = Format.TRAIN1
    """train1: DDAI's (uid, format_version, messages JSON); messages: TRL's conversational shape
    for `ddai train sft`."""
    system_prompt: Path | None = None
    """System prompt file (used as written) for logs without extra.system_prompt. Default: the
    bundled DDAI Searcher prompt."""
    drop_forced: bool = False
    """Drop samples holding a forced max-turn completion (DDAI's injected 'Maximum turn limit
    reached' turn or a paraphrase of it)."""
    drop_system_errors: bool = False
    """Drop samples with a '[System Error: …]' observation."""
    drop_repeated_queries: bool = False
    """Drop samples that send the same search query twice (whitespace and case ignored)."""
    max_system_errors: int | None = None
    """Drop samples with more than N '[System Error:' observations (DDAI's train1 build: 1).
    Default: no cap."""
    val_ratio: float = 0.0
    """Share of the samples written to --val-out instead (DDAI's split: round(n·ratio), at least
    1 of 2 or more, drawn with --seed; DDAI used 0.1). 0: no split."""
    seed: int = 42
    """The train/val split's random seed (DDAI's: 42)."""
    val_out: Path | None = None
    """The validation Parquet file, beside --out (default: <out>.val.parquet; DDAI's names: --out
    DIR/train1.parquet --val-out DIR/val1.parquet)."""
    claim_patterns: list[str] | None = None
    """Observation-claim regex a rewritten think may not add (repeatable; replaces the built-in
    list; default: ddai.toml [distill] claim_patterns, else the built-in list)."""
    max_thinks_per_call: int = 8
    """Split a trajectory's thinks into requests of at most this many."""
    max_chars_per_call: int = 12_000
    dry_run: bool = False
    """Count rewrite calls and their estimated cost; write nothing, call nothing."""
    max_cost: float | None = None
    """Stop before the rewriter spends more than this many USD (finished calls are cached: rerun
    to resume)."""
    retry_failed: bool = False
    """Call again the rewrites that failed before (else their cached failures are reported)."""
    force: bool = False  # rerun when nothing changed (its flag: ``records.rerun.ForceFlag``)
    progress: bool = True
    select_cfg: SelectConfig = field(init=False, repr=False)
    claims: ClaimRules = field(init=False, repr=False)
    chunking: Chunking = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("name the run(s) to distill with --run (see `ddai runs`)")
        if self.rewrite not in REWRITE_MODES:
            raise ValueError(f"--rewrite {self.rewrite!r}: use one of {', '.join(REWRITE_MODES)}")
        if self.fmt not in FORMATS:
            raise ValueError(f"--format {self.fmt!r}: use one of {', '.join(FORMATS)}")
        if Path(self.out).suffix != ".parquet":
            raise ValueError(f"--out {self.out}: the SFT file is Parquet; name it *.parquet")
        if self.max_cost is not None and self.max_cost < 0:
            raise ValueError(f"--max-cost must be >= 0 USD, got {self.max_cost}")
        if self.max_system_errors is not None and self.max_system_errors < 0:
            raise ValueError(f"--max-system-errors must be >= 0, got {self.max_system_errors}")
        if not 0.0 <= self.val_ratio < 1.0:
            raise ValueError(f"--val-ratio must be in [0, 1), got {self.val_ratio}")
        if self.val_ratio > 0:
            if self.val_out is None:
                self.val_out = Path(self.out).with_suffix(".val.parquet")
            v, o = Path(self.val_out), Path(self.out)
            if v.suffix != ".parquet" or v == o or v.parent != o.parent:
                raise ValueError(
                    f"--val-out {v}: name a Parquet file other than --out, in its folder "
                    f"({o.parent}; the files are committed together)"
                )
        elif self.val_out is not None:
            raise ValueError("--val-out needs --val-ratio > 0 (the share of samples it gets)")
        self.select_cfg = SelectConfig(
            self.success_threshold, self.success_rate_max, self.top_k, self.rank
        )
        self.claims = ClaimRules.of(self.claim_patterns)
        self.chunking = Chunking(self.max_thinks_per_call, self.max_chars_per_call)

    @property
    def drops(self) -> Drops:
        return Drops(
            self.drop_forced,
            self.drop_system_errors,
            self.drop_repeated_queries,
            self.max_system_errors,
        )

    def params(self, rewriter_name: str | None) -> dict[str, Any]:
        """What decides the output (the manifest's parameters; a change reruns the step)."""
        # Not part of the result: where things are, how the run is watched, the spending cap.
        skip = {"logs", "out", "dry_run", "force", "progress", "max_cost", "retry_failed"}
        skip |= {"select_cfg", "claims", "chunking", "val_out"}
        # fields added later enter the parameters only when set, so an earlier run's
        # manifest stays fresh
        new = {"max_system_errors": None, "val_ratio": 0.0}
        p = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in skip and not (f.name in new and getattr(self, f.name) == new[f.name])
        }
        if self.val_ratio == 0.0:  # the seed decides nothing without a split
            p.pop("seed")
        p["rewriter"] = rewriter_name
        p["claim_patterns"] = list(self.claims.patterns)
        return p


# ---------------------------------------------------------------- distill check, convert


@dataclass
class CheckConfig:
    """``ddai distill check``: the post-pass over an existing SFT file (the drop flags' help is
    ``DistillConfig``'s)."""

    file: Path
    """An SFT Parquet file (train1 or messages shape)."""
    original: Path | None = None
    """The same samples before their rewrite: enables the rollback rules (outside-think
    changes, action tags, new observation claims)."""
    out: Path | None = None
    """Write the cleaned file here (same shape as FILE)."""
    report: Path | None = None
    """The report JSONL. Default: <out>.report.jsonl; without --out,
    <workspace>/checks/<FILE name>.report.jsonl (the workspace: $DDAI_HOME or ./ddai-work), so
    nothing is written beside FILE."""
    drop_forced: bool = False
    drop_system_errors: bool = False
    drop_repeated_queries: bool = False
    claim_patterns: list[str] | None = None
    progress: bool = True
    claims: ClaimRules = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.out is not None and Path(self.out).suffix != ".parquet":
            raise ValueError(f"--out {self.out}: the SFT file is Parquet; name it *.parquet")
        self.claims = ClaimRules.of(self.claim_patterns)

    @property
    def report_file(self) -> Path:
        if self.report is not None:
            return self.report
        if self.out is not None:
            return report_path(self.out)
        return report_path(workspace.home() / "checks" / Path(self.file).name)


@dataclass(frozen=True)
class ConvertConfig:
    """``ddai distill convert``: one SFT file in the other shape."""

    file: Path
    """The SFT Parquet file to convert (train1 or messages shape)."""
    to: Format
    """The shape to write."""
    out: Path
    """The Parquet file to write."""


# ---------------------------------------------------------------- distill vet

CRITERIA = ("both", "rollout", "queries")
ON_ERROR = ("drop", "keep")


class VetError(RuntimeError):
    """The step ran but could not finish (stopped by ``--max-cost``); exit code 1."""


@dataclass
class VetConfig:
    """One ``ddai distill vet`` run; each field is a flag."""

    file: Path
    """The SFT Parquet file to vet (train1 or messages shape; other columns are kept)."""
    out: Path
    """The Parquet file of the kept trajectories (the input's rows and columns, unchanged)."""
    criteria: str = "both"
    """DDAI's criteria sets: `rollout` (pass/fail: query collapse, repetitive actions, gibberish, evidence mismatch, format violation), `queries` (a label per search query: a gibberish or code query drops the trajectory, drift is kept and labelled), or `both` (dropped when either fails)."""
    vetter: str | None = None
    """Vetter backend name (ddai.toml [backends.NAME]). Default: $DDAI_VETTER, ddai.toml [roles] vetter, else `local` (text heuristics, no model)."""
    max_think_chars: int = 480
    """Each think is cut to this many characters before it is sent (DDAI's default)."""
    on_error: str = "drop"
    """A trajectory whose vetting call failed: `drop` it or `keep` it (counted either way; the command exits 1)."""
    dry_run: bool = False
    """Count the vetting calls and their estimated cost; write nothing, call nothing."""
    max_cost: float | None = None
    """Stop before the vetter spends more than this many USD (finished calls are cached: rerun to resume)."""
    retry_failed: bool = False
    """Call again the vettings that failed before (else their cached failures are reported)."""
    force: bool = False  # rerun when nothing changed (its flag: ``records.rerun.ForceFlag``)
    progress: bool = True
    """Show progress bars."""

    def __post_init__(self) -> None:
        if self.criteria not in CRITERIA:
            raise ValueError(f"--criteria {self.criteria!r}: use one of {', '.join(CRITERIA)}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"--on-error {self.on_error!r}: use one of {', '.join(ON_ERROR)}")
        if Path(self.out).suffix != ".parquet":
            raise ValueError(f"--out {self.out}: the SFT file is Parquet; name it *.parquet")
        if Path(self.out).resolve() == Path(self.file).resolve():
            raise ValueError(f"--out {self.out} is the input file; write the kept rows elsewhere")
        if self.max_think_chars < 1:
            raise ValueError(f"--max-think-chars must be >= 1, got {self.max_think_chars}")
        if self.max_cost is not None and self.max_cost < 0:
            raise ValueError(f"--max-cost must be >= 0 USD, got {self.max_cost}")

    @property
    def sets(self) -> tuple[str, ...]:
        return ("rollout", "queries") if self.criteria == "both" else (self.criteria,)

    @property
    def report(self) -> Path:
        return Path(f"{self.out}{REPORT_SUFFIX}")

    def params(self, vetter_name: str | None) -> dict[str, Any]:
        skip = {"file", "out", "dry_run", "force", "progress", "max_cost", "retry_failed"}
        p = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        p["vetter"] = vetter_name
        return p
