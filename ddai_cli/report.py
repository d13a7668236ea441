"""CLI: ``ddai report``: the HTML analysis report over the rollout logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RunsOpt,
    ThresholdOpt,
    bad_input_exits,
    check_run_ids,
    megabytes,
    summary,
)
from ddai.cli.fields import field_opt
from ddai.cli.flags import default_of  # options would load the episode configs (trainer.episode)
from ddai.pipelines.store import workspace
from ddai.reports.config import ReportConfig

R = ReportConfig


def report_cmd(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="HTML file to write. Default: <workspace>/report.html."),
    ] = None,
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare",
            callback=check_run_ids,
            metavar="<run>",
            help="Compare two runs, given as --compare A --compare B (A the baseline, B the new "
            "one; --compare A B also works): behaviour shift, per-prompt deltas, distributions "
            "side by side.",
        ),
    ] = None,
    datasets: Annotated[
        list[Path] | None,
        typer.Option(
            "--datasets",
            metavar="<file>",
            help="Curated dataset file (a ddai curate output) whose manifests draw the funnel "
            "Sankey; repeat for several.",
        ),
    ] = None,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            "--datasets-dir", help="Folder scanned for curated datasets (files with a manifest)."
        ),
    ] = None,
    flags: Annotated[
        list[Path] | None,
        typer.Option(
            "--flags",
            metavar="<csv>",
            help="Review CSV (uid, verdict, reason) whose wrong/uncertain rows flag a prompt's "
            "ground truth in the failure attribution; repeat for several.",
        ),
    ] = None,
    threshold: ThresholdOpt = default_of(R, "success_threshold"),
    judge_high: Annotated[
        float,
        typer.Option(
            "--judge-high",
            help="Judge score at or above which an answer counts as correct (discrepancies, "
            "hallucination suspects).",
        ),
    ] = default_of(R, "judge_high"),
    ndcg_low: Annotated[
        float,
        typer.Option("--ndcg-low", help="NDCG at or below which retrieval counts as failed."),
    ] = default_of(R, "ndcg_low"),
    judge_low: Annotated[
        float,
        typer.Option(
            "--judge-low", help="Judge score at or below which an answer counts as wrong."
        ),
    ] = default_of(R, "judge_low"),
    ndcg_high: Annotated[
        float,
        typer.Option("--ndcg-high", help="NDCG at or above which retrieval counts as succeeded."),
    ] = default_of(R, "ndcg_high"),
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns", help="Turn budget of the runs. Default: each rollout's extra.max_turns."
        ),
    ] = default_of(R, "max_turns"),
    browse_max: Annotated[
        int,
        typer.Option(
            "--browse-max",
            help="Most rollouts in the trajectory browser (a sample covering every run, outcome "
            "and class), shipped compressed: bounds the file size (5,000 add about 1 MB).",
        ),
    ] = default_of(R, "browse_max"),
    text_max: Annotated[
        int,
        typer.Option(
            "--text-max", help="Characters shown per think, observation or answer before a cut."
        ),
    ] = default_of(R, "text_max"),
    top: Annotated[
        int, typer.Option("--top", help="Rows in ranked lists (suspects, better/worse prompts).")
    ] = default_of(R, "top"),
    value_sft: Annotated[
        list[Path] | None,
        typer.Option(
            "--value-sft",
            metavar="<dir>",
            help="Output folder of `ddai train value-sft` (repeatable): the value section shows "
            "its per-token TD weights (mean, shares at the clip bounds) per step.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the browser's sample.")] = default_of(
        R, "seed"
    ),
    title: Annotated[str | None, typer.Option("--title", help="Page title.")] = default_of(
        R, "title"
    ),
    threads: Annotated[int | None, field_opt(R, "threads", min=1)] = default_of(R, "threads"),
    progress: ProgressOpt = default_of(R, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML report (opens offline): overview, funnel, per-prompt outcomes,
    judge vs NDCG, hallucination suspects, search behaviour, run comparison, trajectory browser,
    then failure attribution, reward latency and coverage, and the drop/keep lists."""
    with bad_input_exits():
        cfg = ReportConfig(
            logs=workspace.logs_dir(logs, demo_fallback=True),
            out=out or workspace.home() / "report.html",
            runs=runs or None,
            success_threshold=threshold,
            judge_high=judge_high,
            ndcg_low=ndcg_low,
            judge_low=judge_low,
            ndcg_high=ndcg_high,
            compare=tuple(compare) if compare else None,
            datasets=datasets or [],
            datasets_dir=datasets_dir,
            flags=flags or [],
            value_sft=value_sft or [],
            max_turns=max_turns,
            browse_max=browse_max,
            text_max=text_max,
            top=top,
            seed=seed,
            title=title,
            threads=threads,
            progress=progress and not as_json,
        )
        from ddai.reports.build import build_report  # plotly, DuckDB: loaded to run, not for --help

        result = build_report(cfg)
    result.pop("stats")
    result.pop("timings")
    if not as_json:  # people read the page's size in MB under a label that says so
        result = {("page size" if k == "bytes" else k): v for k, v in result.items()}
        result["page size"] = megabytes(result["page size"])
    summary("ddai report", result, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("report")(report_cmd)
