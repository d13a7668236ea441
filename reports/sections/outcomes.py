"""Section 3, per-prompt outcomes: success-rate histogram, score bands, zero-variance GRPO groups."""

from __future__ import annotations

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import pct

BANDS = ("=0", "(0, 0.3]", "(0.3, 0.5]", "(0.5, 0.7]", "(0.7, 1)", "=1")


def _success_hist(ctx: ReportContext, df: pl.DataFrame) -> tuple[go.Figure, bool]:
    """Prompts per success rate on a numeric axis; shares of each run's prompts when the runs hold
    different numbers of prompts (else a 36-prompt round would look flat beside a 1,000-prompt
    one). Returns the figure and whether it shows shares."""
    parts = list(ctx.by_run(df))
    sizes = {run: int(part["prompts"].sum()) for run, part in parts}
    shares = len(set(sizes.values())) > 1
    width, offsets = figures.bar_slots(df["success_rate"].to_list(), len(parts))
    fig = go.Figure()
    for i, (run, part) in enumerate(parts):
        counts = part["prompts"].to_list()
        fig.add_trace(
            go.Bar(
                name=figures.label(f"{run} ({sizes[run]:,} prompts)"),
                x=part["success_rate"].to_list(),
                y=[n / sizes[run] for n in counts] if shares else counts,
                width=width,
                offset=offsets[i],
                marker_color=ctx.color(run),
                customdata=[[n, sizes[run]] for n in counts],
                hovertemplate="success rate %{x:.3g}: %{customdata[0]:,} of %{customdata[1]:,} "
                "prompts<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_layout(
        barmode="overlay",
        title="Prompts by success rate" + (" (share of each run's prompts)" if shares else ""),
        xaxis=figures.fraction_axis("success rate of the prompt's rollouts"),
        yaxis={"title": "share of the run's prompts", "tickformat": ".0%"}
        if shares
        else {"title": "prompts"},
    )
    return fig, shares


def _bands(ctx: ReportContext, df: pl.DataFrame) -> tuple[go.Figure, dict[str, dict[str, int]]]:
    counts = {
        run: {BANDS[b]: n for b, n in zip(part["band_idx"], part["prompts"], strict=True)}
        for run, part in ctx.by_run(df)
    }
    sizes = {run: sum(c.values()) for run, c in counts.items()}
    shares = len(set(sizes.values())) > 1  # as in the histogram: runs of unequal size as shares
    fig = go.Figure(
        [
            go.Bar(
                name=figures.label(f"{run} ({sizes[run]:,} prompts)"),
                x=list(BANDS),
                y=[c.get(b, 0) / sizes[run] if shares else c.get(b, 0) for b in BANDS],
                customdata=[c.get(b, 0) for b in BANDS],
                marker_color=ctx.color(run),
                hovertemplate="%{x}: %{customdata:,} prompts<extra>%{fullData.name}</extra>",
            )
            for run, c in counts.items()
        ]
    )
    fig.update_layout(
        barmode="group",
        title="Prompts by mean score band" + (" (share of each run's prompts)" if shares else ""),
        xaxis_title="mean score (reward; judge where no reward)",
        yaxis={"title": "share of the run's prompts", "tickformat": ".0%"}
        if shares
        else {"title": "prompts"},
    )
    return fig, {run: {b: c.get(b, 0) for b in BANDS} for run, c in counts.items()}


def _zero_variance(ctx: ReportContext, df: pl.DataFrame) -> tuple[go.Figure, int]:
    """Share of GRPO groups with zero reward variance: one bar per run when every run has a single
    step (or none), else a heat strip of runs × steps (one row per run, one cell per step), which
    stays readable for hundreds of steps where lines would tangle. Returns the figure and its
    height."""
    parts = list(ctx.by_run(df))
    if all(part.height <= 1 for _, part in parts):
        runs = [run for run, _ in parts]
        fig = go.Figure(
            go.Bar(
                name="groups whose rollouts all scored the same",
                y=[figures.label(r) for r in runs],
                x=[part["zero_variance_share"][0] for _, part in parts],
                orientation="h",
                marker_color=figures.color(3),
                text=[
                    f"{part['zero_variance'][0]:,} of {part['groups'][0]:,}" for _, part in parts
                ],
                textposition="auto",
                hovertemplate="%{y}: %{x:.1%} of groups<extra></extra>",
            )
        )
        fig.update_layout(
            title="GRPO groups with zero reward variance (no learning signal)",
            xaxis={"title": "share of groups", "tickformat": ".0%", "range": [0, 1]},
            yaxis={"autorange": "reversed"},
        )
        return fig, 150 + 36 * len(runs)
    steps = sorted({s for s in df["step"] if s is not None})
    has_null = df["step"].null_count() > 0
    xs: list[int | str] = (["no step"] if has_null else []) + list(steps)
    col = {x: j for j, x in enumerate(xs)}
    z: list[list[float | None]] = []
    custom: list[list[list[int] | None]] = []
    for _, part in parts:
        zr: list[float | None] = [None] * len(xs)
        cr: list[list[int] | None] = [None] * len(xs)
        for r in part.iter_rows(named=True):
            j = col["no step" if r["step"] is None else r["step"]]
            zr[j] = r["zero_variance_share"]
            cr[j] = [r["zero_variance"], r["groups"]]
        z.append(zr)
        custom.append(cr)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(x) for x in xs] if has_null else xs,
            y=[figures.label(run) for run, _ in parts],
            customdata=custom,
            zmin=0,
            zmax=1,
            colorscale="OrRd",
            xgap=1 if len(xs) <= 100 else 0,
            ygap=2,
            hoverongaps=False,
            colorbar={"title": {"text": "share of groups"}, "tickformat": ".0%"},
            hovertemplate="%{y}, step %{x}: %{customdata[0]} of %{customdata[1]} groups "
            "(%{z:.0%})<extra></extra>",
        )
    )
    fig.update_layout(
        title="GRPO groups with zero reward variance, per run and step (grey: no scored group)",
        plot_bgcolor="#e9ecef",  # a step without a scored group must not read as 0%
        xaxis={"title": "step", "type": "category" if has_null else "linear", "showgrid": False},
        yaxis={"autorange": "reversed", "showgrid": False},
    )
    return fig, 170 + 40 * len(parts)


def _no_groups_note(ctx: ReportContext, zv_stats: dict[str, dict]) -> list[Note]:
    """Runs with no GRPO group of two or more scored rollouts, named (the chart and the table
    leave them out)."""
    runs = [r for r in ctx.runs if not (zv_stats.get(r) or {}).get("groups")]
    if not runs:
        return []
    return [
        Note(
            ctx.runs_note(
                runs,
                "no GRPO group of two or more scored rollouts (one prompt's rollouts at one step, "
                "scored by reward or judge)",
                "reward variance",
                "log every rollout of each group (n_agent per prompt) with its reward",
            )
        )
    ]


def build(ctx: ReportContext) -> Section:
    hist = ctx.frame("report_success_hist")
    bands = ctx.frame("report_score_bands")
    zv = ctx.frame("report_zero_variance")
    bands_fig, band_counts = _bands(ctx, bands)
    hist_fig, hist_shares = _success_hist(ctx, hist)
    zv_fig, zv_height = _zero_variance(ctx, zv)
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
        "those rates spread per run (as shares of each run's prompts when the runs differ in "
        "size). Prompts at 0 are out of reach for now, prompts at 1 are "
        "mastered, and the ones in between are where GRPO learns. "
        + (
            f"The bands group prompts by mean score: of {n_prompts:,} prompt-runs, "
            f"{all_bands['=0']:,} scored exactly 0 and {all_bands['=1']:,} exactly 1. "
            if n_prompts
            # nothing counted: say so once rather than recite the counts as zeros
            else "No prompt of these runs has a score (reward or judge), so none is banded. "
        )
        + "A GRPO group whose rollouts all scored the same has zero advantage and teaches nothing: "
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
                hist_fig,
                "fig-outcomes-success-hist",
                empty="No prompt of these runs has a judged rollout: no success rates to chart.",
            ),
            *(Note(t) for t in ctx.lack_notes(("judge",), "success rates")),
            figures.chart_or_note(
                bands_fig, "fig-outcomes-bands", empty="No prompt has a score: no bands to chart."
            ),
            figures.chart_or_note(
                zv_fig,
                "fig-outcomes-zero-variance",
                height=zv_height,
                empty="No group of these runs has scored rollouts: no variance to chart.",
            ),
            *_no_groups_note(ctx, zv_stats),
            *([table] if zv_stats else []),
        ],
        stats={
            "success_hist": {run: {str(k): v for k, v in c.items()} for run, c in rates.items()},
            "success_hist_shares": hist_shares,
            "bands": band_counts,
            "zero_variance": zv_stats,
            "zero_variance_by_step": zv.to_dicts(),
        },
    )
