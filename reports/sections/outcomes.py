"""Section 3, per-prompt outcomes: success-rate histogram, score bands, zero-variance GRPO groups."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from ddai.reports import figures
from ddai.reports.blocks import Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import pct

BANDS = ("=0", "(0, 0.3]", "(0.3, 0.5]", "(0.5, 0.7]", "(0.7, 1)", "=1")


def _success_hist(ctx: ReportContext, df: pl.DataFrame) -> go.Figure:
    fig = go.Figure(
        [
            go.Bar(
                name=figures.label(run),
                x=[figures.fraction_label(v) for v in part["success_rate"]],
                y=part["prompts"].to_list(),
                marker_color=figures.color(i),
                hovertemplate="success rate %{x}: %{y} prompts",
            )
            for i, (run, part) in enumerate(ctx.by_run(df))
        ]
    )
    fig.update_layout(
        barmode="group",
        title="Prompts by success rate",
        xaxis=figures.fraction_axis(
            df["success_rate"].to_list(), "success rate of the prompt's rollouts"
        ),
        yaxis_title="prompts",
    )
    return fig


def _bands(ctx: ReportContext, df: pl.DataFrame) -> tuple[go.Figure, dict[str, dict[str, int]]]:
    counts = {
        run: {BANDS[b]: n for b, n in zip(part["band_idx"], part["prompts"], strict=True)}
        for run, part in ctx.by_run(df)
    }
    fig = go.Figure(
        [
            go.Bar(
                name=figures.label(run),
                x=list(BANDS),
                y=[c.get(b, 0) for b in BANDS],
                marker_color=figures.color(i),
            )
            for i, (run, c) in enumerate(counts.items())
        ]
    )
    fig.update_layout(
        barmode="group",
        title="Prompts by mean score band",
        xaxis_title="mean score (reward; judge where no reward)",
        yaxis_title="prompts",
    )
    return fig, {run: {b: c.get(b, 0) for b in BANDS} for run, c in counts.items()}


def _zero_variance(ctx: ReportContext, df: pl.DataFrame) -> go.Figure:
    categorical = df["step"].null_count() > 0  # logs without steps: one point per run
    fig = go.Figure()
    for i, (run, part) in enumerate(ctx.by_run(df)):
        fig.add_trace(
            go.Scatter(
                name=figures.label(run),
                x=[s if s is not None else "no step" for s in part["step"]],
                y=part["zero_variance_share"].to_list(),
                mode="lines+markers",
                marker_color=figures.color(i),
                customdata=list(zip(part["zero_variance"], part["groups"], strict=True)),
                hovertemplate="step %{x}: %{customdata[0]} of %{customdata[1]} groups",
            )
        )
    fig.update_layout(
        title="GRPO groups with zero reward variance",
        xaxis={"title": "step", "type": "category" if categorical else "-"},
        yaxis={"title": "share of groups", "tickformat": ".0%", "range": [0, 1.05]},
    )
    return fig


def build(ctx: ReportContext) -> Section:
    hist = ctx.frame("report_success_hist")
    bands = ctx.frame("report_score_bands")
    zv = ctx.frame("report_zero_variance")
    bands_fig, band_counts = _bands(ctx, bands)
    zv_runs = (
        zv.group_by("run_id", maintain_order=True)
        .agg(pl.col("groups").sum(), pl.col("zero_variance").sum(), pl.col("all_zero").sum())
        .with_columns(share=pl.col("zero_variance") / pl.col("groups"))
    )
    zv_stats = {r["run_id"]: r for r in zv_runs.to_dicts()}
    table = Table(
        columns=["run", "GRPO groups", "zero variance", "share", "of which all scored 0"],
        rows=[
            [run, r["groups"], r["zero_variance"], pct(r["share"]), r["all_zero"]]
            for run, r in zv_stats.items()
        ],
        caption="A group is one prompt's rollouts at one step (two or more scored).",
    )
    tot_groups = sum(r["groups"] for r in zv_stats.values())
    tot_zero = sum(r["zero_variance"] for r in zv_stats.values())
    all_bands = {b: sum(c[b] for c in band_counts.values()) for b in BANDS}
    n_prompts = sum(all_bands.values())
    reading = (
        "Each prompt is scored by the share of its rollouts that succeeded; the histogram shows how "
        "those rates spread per run. Prompts at 0 are out of reach for now, prompts at 1 are "
        "mastered, and the ones in between are where GRPO learns. The bands group prompts by mean "
        f"score: of {n_prompts:,} prompt-runs, {all_bands['=0']:,} scored exactly 0 and "
        f"{all_bands['=1']:,} exactly 1. A GRPO group whose rollouts all scored the same has zero "
        "advantage and teaches nothing: "
        + (
            f"{tot_zero:,} of {tot_groups:,} groups ({pct(tot_zero / tot_groups)}) had no "
            "learning signal."
            if tot_groups
            else "no group had two or more scored rollouts."
        )
    )
    rates = {
        run: dict(zip(part["success_rate"].to_list(), part["prompts"].to_list(), strict=True))
        for run, part in ctx.by_run(hist)
    }
    return Section(
        id="outcomes",
        title="Per-prompt outcomes",
        reading=reading,
        blocks=[
            figures.chart_or_note(
                _success_hist(ctx, hist),
                "fig-outcomes-success-hist",
                empty="No prompt of these runs has a judged rollout: no success rates to chart.",
            ),
            figures.chart_or_note(
                bands_fig, "fig-outcomes-bands", empty="No prompt has a score: no bands to chart."
            ),
            figures.chart_or_note(
                _zero_variance(ctx, zv),
                "fig-outcomes-zero-variance",
                empty="No group of these runs has scored rollouts: no variance to chart.",
            ),
            table,
        ],
        stats={
            "success_hist": {run: {str(k): v for k, v in c.items()} for run, c in rates.items()},
            "bands": band_counts,
            "zero_variance": zv_stats,
            "zero_variance_by_step": zv.to_dicts(),
        },
    )
