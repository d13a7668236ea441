"""CLI: ``ddai distill`` (rare-success SFT from a run), ``ddai distill check`` (the safety
post-pass over an existing SFT file) and ``ddai distill convert`` (train1 ⇄ messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RetryFailedOpt,
    ThresholdOpt,
    bad_input_exits,
    check_run_ids,
    choices,
    exit_if_calls_failed,
    fail,
    summary,
)
from ddai.cli.flags import default_of  # options would load the episode configs (trainer.episode)
from ddai.pipelines.distill import (
    FORMATS,
    CheckConfig,
    DistillConfig,
    DistillError,
    convert,
    run_check,
    run_distill,
)
from ddai.pipelines.distill.run import REWRITE_MODES
from ddai.pipelines.distill.select import RANKS
from ddai.pipelines.store import workspace

Rewrite = choices("Rewrite", REWRITE_MODES)
Rank = choices("Rank", RANKS)
Fmt = choices("Fmt", FORMATS)
D, C = DistillConfig, CheckConfig


DropForcedOpt = Annotated[
    bool,
    typer.Option(
        "--drop-forced",
        help="Drop samples holding a forced max-turn completion (DDAI's injected "
        "'Maximum turn limit reached' turn or a paraphrase of it).",
    ),
]
DropErrorsOpt = Annotated[
    bool,
    typer.Option(
        "--drop-system-errors", help="Drop samples with a '[System Error: …]' observation."
    ),
]
DropRepeatsOpt = Annotated[
    bool,
    typer.Option(
        "--drop-repeated-queries",
        help="Drop samples that send the same search query twice (whitespace and case ignored).",
    ),
]
ClaimOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--claim-pattern",
        metavar="<regex>",
        help="Observation-claim regex a rewritten think may not add (repeatable; replaces the "
        "built-in list; default: ddai.toml [distill] claim_patterns, else the built-in list).",
    ),
]
RunOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--run",
        metavar="<run>",
        callback=check_run_ids,
        help="Run id to distill (required; repeat to pool several runs). Each run needs parsed "
        "turns.",
    ),
]

distill_app = typer.Typer(
    name="distill",
    help="Rare-success SFT distillation: select successful rollouts of hard prompts, rewrite "
    "their thinks (optional), run the safety post-pass, write train1 or messages Parquet. "
    "Needs runs with parsed turns (`ddai runs` shows them): DDAI's flash_rm_detail logs carry "
    "none, so distill refuses them (exit 2); ingest the unified log of the same round instead.",
    rich_markup_mode=None,
)


def _claims(flag: list[str] | None) -> list[str] | None:
    return flag or workspace.setting("distill", "claim_patterns")


def _run(fn, *args: Any) -> dict[str, Any]:
    try:
        return fn(*args)
    except (ValueError, FileNotFoundError) as e:
        raise fail(str(e)) from e
    except (DistillError, OSError) as e:
        raise fail(str(e), EXIT_FAILED) from e


@distill_app.callback(invoke_without_command=True)
def distill_cmd(
    ctx: typer.Context,
    logs: LogsOpt = None,
    runs: RunOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="<file>", help="The SFT Parquet file to write (required)."
        ),
    ] = None,
    success_rate_max: Annotated[
        float,
        typer.Option(
            "--success-rate-max", help="Keep prompts whose success rate is > 0 and <= this."
        ),
    ] = default_of(D, "success_rate_max"),
    top_k: Annotated[
        int,
        typer.Option(
            "--top-k",
            help="Successful rollouts kept per prompt, best first (see --rank).",
        ),
    ] = default_of(D, "top_k"),
    rank: Annotated[
        Rank,
        typer.Option(
            "--rank",
            help="ddai: DDAI's finalize order (NDCG desc, fewer searches, fewer bboxes, shorter "
            "assistant text, then log order); reward: reward desc, NDCG desc, fewer actions, "
            "rollout_idx.",
        ),
    ] = Rank(default_of(D, "rank")),
    success_threshold: ThresholdOpt = default_of(D, "success_threshold"),
    rewrite: Annotated[
        Rewrite,
        typer.Option("--rewrite", help="think-only: rewrite thinks only; none: no rewriter."),
    ] = Rewrite(default_of(D, "rewrite")),
    rewriter: Annotated[
        str | None,
        typer.Option(
            "--rewriter",
            help="Rewriter backend name (ddai.toml [backends.NAME]). Default: $DDAI_REWRITER, "
            "ddai.toml [roles] rewriter, else identity (no model).",
        ),
    ] = None,
    fmt: Annotated[
        Fmt,
        typer.Option(
            "--format",
            help="train1: DDAI's (uid, format_version, messages JSON); messages: "
            "TRL's conversational shape for `ddai train sft`.",
        ),
    ] = Fmt(default_of(D, "fmt")),
    system_prompt: Annotated[
        Path | None,
        typer.Option(
            "--system-prompt",
            help="System prompt file (used as written) for logs without extra.system_prompt. "
            "Default: the bundled DDAI Searcher prompt.",
        ),
    ] = None,
    drop_forced: DropForcedOpt = False,
    drop_system_errors: DropErrorsOpt = False,
    drop_repeated_queries: DropRepeatsOpt = False,
    max_system_errors: Annotated[
        int | None,
        typer.Option(
            "--max-system-errors",
            metavar="<int>",
            help="Drop samples with more than N '[System Error:' observations (DDAI's train1 "
            "build: 1). Default: no cap.",
        ),
    ] = None,
    val_ratio: Annotated[
        float,
        typer.Option(
            "--val-ratio",
            help="Share of the samples written to --val-out instead (DDAI's split: "
            "round(n·ratio), at least 1 of 2 or more, drawn with --seed; DDAI used 0.1). "
            "0: no split.",
        ),
    ] = default_of(D, "val_ratio"),
    seed: Annotated[
        int, typer.Option("--seed", help="The train/val split's random seed (DDAI's: 42).")
    ] = default_of(D, "seed"),
    val_out: Annotated[
        Path | None,
        typer.Option(
            "--val-out",
            metavar="<file>",
            help="The validation Parquet file, beside --out (default: <out>.val.parquet; "
            "DDAI's names: --out DIR/train1.parquet --val-out DIR/val1.parquet).",
        ),
    ] = None,
    claim_pattern: ClaimOpt = None,
    max_thinks_per_call: Annotated[
        int,
        typer.Option(
            "--max-thinks-per-call",
            help="Split a trajectory's thinks into requests of at most this many.",
        ),
    ] = default_of(D, "max_thinks_per_call"),
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Count rewrite calls and their estimated cost; write nothing, call nothing.",
        ),
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="Stop before the rewriter spends more than this many USD "
            "(finished calls are cached: rerun to resume).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rerun even when inputs and parameters are unchanged.")
    ] = False,
    retry_failed: RetryFailedOpt = default_of(D, "retry_failed"),
    progress: ProgressOpt = default_of(D, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Distill rare successes of a run into SFT data (see `ddai distill check` for files)."""
    if ctx.invoked_subcommand is not None:
        return
    if not runs:
        raise fail("--run is required: name the run to distill (`ddai runs` lists them)")
    if out is None:
        raise fail("--out is required: the SFT Parquet file to write, e.g. --out sft.parquet")
    with bad_input_exits():
        cfg = DistillConfig(
            logs=workspace.logs_dir(logs),
            runs=runs,
            out=out,
            success_rate_max=success_rate_max,
            top_k=top_k,
            rank=rank.value,
            success_threshold=success_threshold,
            rewrite=rewrite.value,
            rewriter=rewriter,
            fmt=fmt.value,
            system_prompt=system_prompt,
            drop_forced=drop_forced,
            drop_system_errors=drop_system_errors,
            drop_repeated_queries=drop_repeated_queries,
            max_system_errors=max_system_errors,
            val_ratio=val_ratio,
            seed=seed,
            val_out=val_out,
            claim_patterns=_claims(claim_pattern),
            max_thinks_per_call=max_thinks_per_call,
            dry_run=dry_run,
            max_cost=max_cost,
            force=force,
            progress=progress and not as_json,
            retry_failed=retry_failed,
        )
    data = _run(run_distill, cfg)
    summary("ddai distill", data, as_json=as_json)
    exit_if_calls_failed(data)


@distill_app.command("check", short_help="Run the safety post-pass over an existing SFT file.")
def check_cmd(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="An SFT Parquet file (train1 or messages shape).")
    ],
    original: Annotated[
        Path | None,
        typer.Option(
            "--original",
            help="The same samples before their rewrite: enables the rollback rules (outside-"
            "think changes, action tags, new observation claims).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="<file>",
            help="Write the cleaned file here (same shape as FILE).",
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="The report JSONL. Default: <out>.report.jsonl; without --out, "
            "<workspace>/checks/<FILE name>.report.jsonl (the workspace: $DDAI_HOME or "
            "./ddai-work), so nothing is written beside FILE.",
        ),
    ] = None,
    drop_forced: DropForcedOpt = False,
    drop_system_errors: DropErrorsOpt = False,
    drop_repeated_queries: DropRepeatsOpt = False,
    claim_pattern: ClaimOpt = None,
    progress: ProgressOpt = default_of(C, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Run the safety post-pass over an existing SFT file and report what it finds."""
    with bad_input_exits():
        cfg = CheckConfig(
            file=file,
            original=original,
            out=out,
            report=report,
            drop_forced=drop_forced,
            drop_system_errors=drop_system_errors,
            drop_repeated_queries=drop_repeated_queries,
            claim_patterns=_claims(claim_pattern),
            progress=progress and not as_json,
        )
    summary("ddai distill check", _run(run_check, cfg), as_json=as_json)


@distill_app.command(
    "convert", short_help="Convert an SFT file between the train1 and messages shapes."
)
def convert_cmd(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="An SFT Parquet file (train1 or messages shape).")
    ],
    to: Annotated[Fmt, typer.Option("--to", help="The shape to write.")],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="<file>", help="The Parquet file to write.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Convert an SFT file between the train1 and messages shapes, byte for byte."""
    summary("ddai distill convert", _run(convert, file, out, to.value), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(distill_app, name="distill")
