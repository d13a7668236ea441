"""Section 6, search behaviour: actions per rollout, repeated queries, invalid actions, golden rank,
turns used against the budget (DDAI's behaviour-shift measures)."""

from __future__ import annotations

from typing import Any

from plotly.subplots import make_subplots

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Block, Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num, pct

# (key, label, formatter) of the per-run behaviour table; the comparison section reuses it.
METRICS: tuple[tuple[str, str, Any], ...] = (
    ("mean_search", "searches per rollout", num),
    ("median_search", "median searches", num),
    ("mean_bbox", "bbox per rollout", num),
    ("zero_search_share", "zero-search rollouts", pct),
    ("duplicate_query_share", "rollouts repeating a query", pct),
    ("consecutive_repeat_share", "rollouts repeating the previous query", pct),
    ("invalid_turn_rate", "invalid turns", pct),
    ("invalid_rollout_share", "rollouts with an invalid turn", pct),
    ("ndcg_positive_share", "rollouts with NDCG > 0", pct),
    ("mean_first_golden_rank", "mean rank of the first golden page", num),
    ("mean_turns", "turns per rollout", num),
    ("max_turns", "max_turns", num),
    ("at_max_turns_share", "rollouts using every turn", pct),
    ("forced_share", "forced completions", pct),
)


def _shares(part: pl.DataFrame, key: str) -> tuple[list[Any], list[float]]:
    total = part["rollouts"].sum()
    return part[key].to_list(), [n / total for n in part["rollouts"]]


def _actions(ctx: ReportContext, hist: pl.DataFrame) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=["searches per rollout", "bbox per rollout"])
    for col, action in enumerate(("search", "bbox"), start=1):
        sub = hist.filter(pl.col("action") == action)
        for run, part in ctx.by_run(sub):
            x, y = _shares(part, "per_rollout")
            fig.add_trace(
                go.Bar(
                    name=figures.label(run),
                    x=x,
                    y=y,
                    marker_color=ctx.color(run),
                    legendgroup=run,
                    showlegend=col == 1,
                    hovertemplate="%{x} per rollout: %{y:.1%}",
                ),
                row=1,
                col=col,
            )
    fig.update_layout(barmode="group", title="Actions per rollout (share of rollouts)")
    fig.update_yaxes(tickformat=".0%")
    return fig


def _golden_rank(ctx: ReportContext, hist: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    for run, part in ctx.by_run(hist):
        ranks, y = _shares(part, "first_golden_rank")
        fig.add_trace(
            go.Bar(
                name=figures.label(run),
                x=[str(r) if r is not None else "none" for r in ranks],
                y=y,
                marker_color=ctx.color(run),
                hovertemplate="rank %{x}: %{y:.1%}",
            )
        )
    fig.update_layout(
        barmode="group",
        title="Rank of the first golden page among retrieved pages",
        xaxis={"title": "rank (none: no golden page retrieved)", "type": "category"},
        yaxis={"title": "share of rollouts", "tickformat": ".0%"},
    )
    return fig


def _turns(ctx: ReportContext, hist: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    for run, part in ctx.by_run(hist):
        x, y = _shares(part, "num_turns")
        fig.add_trace(go.Bar(name=figures.label(run), x=x, y=y, marker_color=ctx.color(run)))
        limit = part["max_turns"].max()
        if limit is not None:
            fig.add_vline(
                x=limit, line_dash="dash", line_color=ctx.color(run), annotation_text="max_turns"
            )
    fig.update_layout(
        barmode="group",
        title="Turns used",
        xaxis_title="turns",
        yaxis={"title": "share of rollouts", "tickformat": ".0%"},
    )
    return fig


def behaviour_table(rows: dict[str, dict[str, Any]]) -> Table:
    runs = list(rows)
    return Table(
        columns=["", *runs],
        rows=[[label, *(fmt(rows[r][key]) for r in runs)] for key, label, fmt in METRICS],
    )


def build(ctx: ReportContext) -> Section:
    per_run = {r["run_id"]: r for r in ctx.frame("report_behaviour_runs").to_dicts()}
    actions = ctx.frame("report_action_hist")
    ranks = ctx.frame("report_golden_rank_hist")
    turns = ctx.frame("report_turns_hist")
    no_turns = ctx.lacking("turns")
    # Runs without parsed turns have no behaviour to measure: their table cells would be dashes.
    measured = {r: v for r, v in per_run.items() if r not in no_turns}
    n = sum(r["rollouts"] for r in measured.values())
    zero = sum(r["zero_search"] for r in measured.values())
    dup = sum(r["duplicate_query"] for r in measured.values())
    reading = (
        "How the Searcher spends its turns. The table shows, per run, how many searches and crops "
        "a rollout takes, how often it never searches (answers without evidence), repeats a query "
        "(a search loop) or writes an invalid action, how high the first golden page ranks among "
        "the pages it saw, and how many turns it uses against the budget. Shifts here explain "
        f"changes in reward. Over {num(n)} rollouts with parsed turns, {num(zero)} never searched "
        f"and {num(dup)} repeated a query."
    )
    blocks: list[Block] = []
    if no_turns:
        blocks.append(Note(ctx.lack_note("turns", "search behaviour (actions, repeats, turns)")))
    if measured:
        blocks.append(behaviour_table(measured))
    golden = figures.chart_or_note(
        _golden_rank(ctx, ranks),
        "fig-behaviour-golden-rank",
        empty="No rollout of these runs has reference pages: there is no golden rank.",
    )
    if not measured:  # the sentence above says why; no empty action or turn charts
        blocks.append(golden)
    else:
        blocks += [
            figures.chart_or_note(
                _actions(ctx, actions),
                "fig-behaviour-actions",
                empty="No rollout with parsed turns took an action.",
            ),
            golden,
            figures.chart_or_note(
                _turns(ctx, turns),
                "fig-behaviour-turns",
                empty="No rollout of these runs records its number of turns.",
            ),
        ]
    return Section(
        id="behaviour",
        title="Search behaviour",
        reading=reading,
        blocks=blocks,
        stats={
            "runs": per_run,
            "without_turns": no_turns,
            "golden_rank": {
                run: {
                    str(k) if k is not None else "none": v
                    for k, v in zip(part["first_golden_rank"], part["rollouts"], strict=True)
                }
                for run, part in ctx.by_run(ranks)
            },
        },
    )
