"""Section 4, judge vs NDCG: their joint distribution and the classes where they disagree.

DDAI's discrepancy analysis: a correct answer without the golden page (judge high, NDCG low) is
either a *same-document success* (a retrieved page shares the reference document, which often
repeats the fact on another slide) or an answer with *no page from the reference document*; a
wrong answer with perfect retrieval (judge low, NDCG high) means generation or ground truth failed.
"""

from __future__ import annotations

import math

from plotly.subplots import make_subplots

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num, pct

MAX_LEVELS = 11
"""A judge with at most this many distinct scores is charted by its own levels, else in bins."""
BINS = 10
NDCG_BANDS = ("0", "(0, 0.2]", "(0.2, 0.4]", "(0.4, 0.6]", "(0.6, 0.8]", "(0.8, 1)", "1")
CLASSES = ("same_doc_success", "no_reference_doc", "retrieval_ok_answer_wrong")
MAX_COLS = 3
ROW_PX = 260
"""Height of one row of heatmaps, in pixels."""
ROW_GAP_PX = 90
"""Gap between two rows of heatmaps, in pixels."""
MARGIN_PX = 138
"""The figure's top (title and first run titles) and bottom margins."""


def heat_height(rows: int) -> int:
    """The heatmap grid's plot area in pixels: ``rows`` rows and the gaps between them."""
    return rows * ROW_PX + (rows - 1) * ROW_GAP_PX


def _judge_labels(levels: list[float], bins: int) -> list[str]:
    if not bins:
        return [f"{v:g}" for v in levels]
    return [f"[{v:g}, {v + 1 / bins:.2g}{']' if v + 1 / bins >= 1 - 1e-9 else ')'}" for v in levels]


def _heatmaps(ctx: ReportContext) -> tuple[go.Figure, int, dict[str, object]]:
    """One heatmap per run: judge levels (rows, the judge's own scores when it grades in a few
    levels) × NDCG bands (columns, 0 and 1 apart: the discrepancy classes sit there). Colour is the
    share of the run's rollouts, one colour bar for all runs; cells print counts.

    Returns the figure, its number of subplot rows and the grid (for the section's stats)."""
    n_levels = int(ctx.frame("report_judge_levels")["levels"][0])
    bins = 0 if n_levels <= MAX_LEVELS else BINS
    grid = ctx.frame("report_judge_ndcg_grid", judge_bins=bins)
    levels = sorted(set(grid["judge_level"].to_list()))
    if bins:  # every bin, so the axis reads as a scale
        levels = [i / bins for i in range(bins)]
    labels = _judge_labels(levels, bins)
    row_of = {round(v, 6): k for k, v in enumerate(levels)}
    parts = list(ctx.by_run(grid))
    cols = min(MAX_COLS, max(len(parts), 1))
    rows = max(1, math.ceil(len(parts) / cols))
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[figures.label(run) for run, _ in parts],
        horizontal_spacing=0.1,
        # a fixed gap in pixels (the x ticks, the axis title and the next run's title), as a
        # share of the plot area: any number of rows fits (plotly refuses a share over 1/(rows-1))
        vertical_spacing=ROW_GAP_PX / heat_height(rows) if rows > 1 else 0.0,
    )
    top = 0.0
    for k, (_, part) in enumerate(parts):
        total = int(part["rollouts"].sum())
        # empty cells stay blank (None), so the populated ones stand out
        counts: list[list[int | None]] = [[None] * len(NDCG_BANDS) for _ in levels]
        for j, n, c in zip(part["judge_level"], part["ndcg_band"], part["rollouts"], strict=True):
            counts[row_of[round(j, 6)]][n] = c
        z = [[None if c is None else c / total for c in row] for row in counts]
        top = max([top, *(v for row in z for v in row if v is not None)])
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=list(NDCG_BANDS),
                y=labels,
                text=[["" if c is None else f"{c:,}" for c in row] for row in counts],
                texttemplate="%{text}",
                coloraxis="coloraxis",
                hoverongaps=False,
                xgap=2,
                ygap=2,
                hovertemplate="judge %{y}, NDCG %{x}: %{text} rollouts (%{z:.1%} of the run)"
                "<extra></extra>",
            ),
            row=k // cols + 1,
            col=k % cols + 1,
        )
    what = "its levels" if not bins else f"bins of {1 / BINS:g}"
    fig.update_layout(
        title=f"Rollouts by judge score (rows, {what}) and NDCG (columns)",
        coloraxis={
            "colorscale": "Blues",
            "cmin": 0,
            "cmax": top or 1,
            "colorbar": {"title": {"text": "share of<br>the run"}, "tickformat": ".0%"},
        },
    )
    fig.update_layout(margin={"t": 90})  # room for the run titles under the figure's title
    fig.update_xaxes(title_text="NDCG", type="category", showgrid=False)
    fig.update_yaxes(title_text="judge", type="category", showgrid=False)
    stats = {
        "judge_levels": labels,
        "ndcg_bands": list(NDCG_BANDS),
        "judge_binned": bool(bins),
        "corners": corners(grid, ctx.cfg.judge_low, ctx.cfg.judge_high, bins),
    }
    return fig, rows, stats


HIGH_BANDS = (5, 6)
"""The heatmap's NDCG columns above 0.8: retrieval found the golden pages (or nearly)."""


def corners(grid: pl.DataFrame, judge_low: float, judge_high: float, bins: int) -> dict[str, int]:
    """The heatmap's four corners, counted from the cells it draws (every run together).

    A row is *wrong* when its judge level is at most ``judge_low`` (binned: the bottom bin, whose
    scores start at 0), *right* when at least ``judge_high``; a column is *no golden page* (NDCG
    0) or *golden pages found* (NDCG > 0.8). ``agree``: wrong × NDCG 0 plus right × NDCG > 0.8;
    ``wrong_found``: wrong × NDCG > 0.8; ``right_none``: right × NDCG 0; ``scored``: every cell.
    """
    out = {"scored": 0, "agree": 0, "wrong_found": 0, "right_none": 0}
    for level, band, n in zip(
        grid["judge_level"], grid["ndcg_band"], grid["rollouts"], strict=True
    ):
        wrong = level <= judge_low + 1e-9 or (bins and level < 1e-9)
        right = level >= judge_high - 1e-9
        out["scored"] += n
        if (wrong and band == 0) or (right and band in HIGH_BANDS):
            out["agree"] += n
        elif wrong and band in HIGH_BANDS:
            out["wrong_found"] += n
        elif right and band == 0:
            out["right_none"] += n
    return out


def build(ctx: ReportContext) -> Section:
    cfg = ctx.cfg
    heat, heat_rows, grid_stats = _heatmaps(ctx)
    counts = ctx.frame("report_discrepancy_counts")
    per_run = {r["run_id"]: r for r in counts.to_dicts()}
    labels = {
        "same_doc_success": f"judge ≥ {cfg.judge_high:g}, NDCG ≤ {cfg.ndcg_low:g}, same document",
        "no_reference_doc": f"judge ≥ {cfg.judge_high:g}, NDCG ≤ {cfg.ndcg_low:g}, "
        "no page of the reference document",
        "retrieval_ok_answer_wrong": f"judge ≤ {cfg.judge_low:g}, NDCG ≥ {cfg.ndcg_high:g}",
    }
    bars = go.Figure(
        [
            go.Bar(
                name=labels[c],
                y=[figures.label(run) for run in per_run],
                x=[r[c] / r["scored"] if r["scored"] else 0 for r in per_run.values()],
                customdata=[r[c] for r in per_run.values()],
                orientation="h",
                marker_color=figures.color(i),
                hovertemplate="%{customdata} rollouts (%{x:.1%})",
            )
            for i, c in enumerate(CLASSES)
        ]
    )
    bars.update_layout(
        barmode="group",
        title="Discrepancy classes, share of rollouts with both scores",
        xaxis={"tickformat": ".1%"},
        yaxis={"autorange": "reversed"},
    )
    table = Table(
        columns=["run", "judged with NDCG", *labels.values()],
        rows=[
            [run, r["scored"], *(f"{r[c]:,} ({pct(r[c] / r['scored'])})" for c in CLASSES)]
            for run, r in per_run.items()
        ],
    )
    tot = {k: sum(r[k] for r in per_run.values()) for k in ("scored", *CLASSES)}
    high_low = tot["same_doc_success"] + tot["no_reference_doc"]
    c = grid_stats["corners"]
    between = c["scored"] - c["agree"] - c["wrong_found"] - c["right_none"]
    wrong_txt = f"≤ {cfg.judge_low:g}" if not grid_stats["judge_binned"] else "in the bottom row"
    corner_txt = (
        f"{num(c['agree'])} sit in the corners where the two agree (judged wrong with NDCG 0, or "
        f"judged correct with NDCG above 0.8) and {num(c['wrong_found'] + c['right_none'])} in "
        f"the corners where they disagree: {num(c['wrong_found'])} judged wrong (judge "
        f"{wrong_txt}) although NDCG is above 0.8 (the golden pages were found: the generator or "
        f"the ground truth failed, candidates for ground-truth review) and "
        f"{num(c['right_none'])} judged correct (≥ {cfg.judge_high:g}) with NDCG 0 (no golden "
        f"page retrieved); the other {num(between)} "
        "have a judge score or an NDCG in between."
    )
    reading = (
        "Each cell counts rollouts by their judge score and NDCG (colour: share of the run's "
        "rollouts); mass in the bottom-left and top-right corners means the two agree, "
        f"off the diagonal NDCG's golden pages and the judge disagree. Of the heatmap's "
        f"{num(c['scored'])} rollouts with both scores, {corner_txt} At the discrepancy classes' "
        f"thresholds, {num(high_low)} were judged correct (≥ {cfg.judge_high:g}) with NDCG ≤ "
        f"{cfg.ndcg_low:g}: {num(tot['same_doc_success'])} "
        "retrieved another page of the reference document (the fact is often repeated there, so "
        f"NDCG undercounts), {num(tot['no_reference_doc'])} no page of it at all (the answer came "
        f"from elsewhere: look at them). {num(tot['retrieval_ok_answer_wrong'])} were judged wrong "
        f"(≤ {cfg.judge_low:g}) although retrieval was perfect (NDCG ≥ {cfg.ndcg_high:g})."
    )
    if not c["scored"]:
        # nothing counted: say so once rather than recite the counts above as zeros
        reading = reading.split(" Of the heatmap's")[0] + (
            " None of these runs' rollouts has both a judge score and NDCG, so none is counted "
            "here."
        )
    if not tot["scored"]:
        empty_classes = (
            "No rollout of these runs has both a judge score and NDCG: no discrepancy class to "
            "chart."
        )
    elif c["wrong_found"] or c["right_none"]:
        empty_classes = (
            f"None of the {num(tot['scored'])} rollouts with both scores falls in a discrepancy "
            f"class at these thresholds (judge ≥ {cfg.judge_high:g} with NDCG ≤ "
            f"{cfg.ndcg_low:g}; judge ≤ {cfg.judge_low:g} with NDCG ≥ {cfg.ndcg_high:g}), yet "
            f"{num(c['wrong_found'] + c['right_none'])} sit in the heatmap's disagreeing corners "
            f"({num(c['wrong_found'])} judged wrong with NDCG above 0.8, {num(c['right_none'])} "
            "judged correct with NDCG 0)"
            + (
                ": --ndcg-high 0.8 puts the first into a class."
                if c["wrong_found"] and cfg.ndcg_high > 0.8
                else "."
            )
        )
    else:
        empty_classes = (
            f"None of the {num(tot['scored'])} rollouts with both scores falls in a discrepancy "
            "class, and none sits in the heatmap's disagreeing corners: nothing to chart."
        )
    return Section(
        id="judge-ndcg",
        title="Judge vs NDCG",
        reading=reading,
        blocks=[
            figures.chart_or_note(
                heat,
                "fig-judge-ndcg-heatmap",
                height=MARGIN_PX + heat_height(heat_rows),
                empty="No rollout of these runs has both a judge score and NDCG: nothing to chart.",
            ),
            figures.chart_or_note(
                bars,
                "fig-judge-ndcg-classes",
                height=160 + 60 * len(per_run),
                empty=empty_classes,
            ),
            *(Note(t) for t in ctx.lack_notes(("judge", "ndcg"), "judge vs NDCG")),
            *([table] if per_run else []),
        ],
        stats={
            "thresholds": {
                "judge_high": cfg.judge_high,
                "ndcg_low": cfg.ndcg_low,
                "judge_low": cfg.judge_low,
                "ndcg_high": cfg.ndcg_high,
            },
            "discrepancies": per_run,
            "grid": grid_stats,
        },
    )
