"""CLI: ``ddai report``: the HTML analysis report over the rollout logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, LogsOpt, RunsOpt, ThresholdOpt, check_run_ids, fail, summary
from ddai.pipelines import workspace
from ddai.reports import ReportConfig, build_report


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
            metavar="RUN",
            help="Compare two runs, given as --compare A --compare B (A the baseline, B the new "
            "one; --compare A B also works): behaviour shift, per-prompt deltas, distributions "
            "side by side.",
        ),
    ] = None,
    datasets: Annotated[
        list[Path] | None,
        typer.Option(
            "--datasets",
            metavar="FILE",
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
            metavar="CSV",
            help="Review CSV (uid, verdict, reason) whose wrong/uncertain rows flag a prompt's "
            "ground truth in the failure attribution; repeat for several.",
        ),
    ] = None,
    threshold: ThresholdOpt = 1.0,
    judge_high: Annotated[
        float,
        typer.Option(
            "--judge-high",
            help="Judge score at or above which an answer counts as correct (discrepancies, "
            "hallucination suspects).",
        ),
    ] = 0.5,
    ndcg_low: Annotated[
        float,
        typer.Option("--ndcg-low", help="NDCG at or below which retrieval counts as failed."),
    ] = 0.0,
    judge_low: Annotated[
        float,
        typer.Option(
            "--judge-low", help="Judge score at or below which an answer counts as wrong."
        ),
    ] = 0.0,
    ndcg_high: Annotated[
        float,
        typer.Option("--ndcg-high", help="NDCG at or above which retrieval counts as succeeded."),
    ] = 1.0,
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns", help="Turn budget of the runs. Default: each rollout's extra.max_turns."
        ),
    ] = None,
    browse_max: Annotated[
        int,
        typer.Option(
            "--browse-max",
            help="Most rollouts in the trajectory browser (a sample covering every run, outcome "
            "and class), shipped compressed: bounds the file size (5,000 add about 1 MB).",
        ),
    ] = 500,
    text_max: Annotated[
        int,
        typer.Option(
            "--text-max", help="Characters shown per think, observation or answer before a cut."
        ),
    ] = 2_000,
    top: Annotated[
        int, typer.Option("--top", help="Rows in ranked lists (suspects, better/worse prompts).")
    ] = 25,
    value_sft: Annotated[
        list[Path] | None,
        typer.Option(
            "--value-sft",
            metavar="DIR",
            help="Output folder of `ddai train value-sft` (repeatable): the value section shows "
            "its per-token TD weights (mean, shares at the clip bounds) per step.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the browser's sample.")] = 0,
    title: Annotated[str | None, typer.Option("--title", help="Page title.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML report (opens offline): overview, funnel, per-prompt outcomes,
    judge vs NDCG, hallucination suspects, search behaviour, run comparison, trajectory browser,
    then failure attribution, reward latency and coverage, and the drop/keep lists."""
    try:
        cfg = ReportConfig(
            logs=workspace.logs_dir(logs),
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
            progress=progress and not as_json,
        )
        result = build_report(cfg)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    result.pop("stats")
    result.pop("timings")
    summary("ddai report", result, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("report")(report_cmd)
