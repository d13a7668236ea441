"""Section 1, overview: runs, prompts, rollouts, success, mean scores, turns, terminations, cost."""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.deps import go
from ddai.reports import figures
from ddai.reports.blocks import Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num, pct, plural

TERMINATIONS = {
    "complete": "#2a9d5c",
    "max_turns": "#dc6b1f",
    "invalid": "#8e44ad",
    "error": "#c0392b",
    "unknown": "#7f8c8d",
}


def _scores(total: dict[str, Any]) -> str:
    """The reading's success and score clause; what no rollout carries is said, not shown as a
    dash over a count of 0."""
    ndcg = total["mean_ndcg"]
    if not total["judged"]:
        if ndcg is None:
            return (
                "No rollout is judged (no success rate or mean judge score) and none carries NDCG, "
            )
        return (
            "No rollout is judged (no success rate or mean judge score); the mean NDCG is "
            f"{num(ndcg)}, "
        )
    return (
        f"{pct(total['success_rate'])} of the {num(total['judged'])} judged rollouts succeeded; "
        f"the mean judge score is {num(total['mean_judge'])} and "
        + ("no rollout carries NDCG, " if ndcg is None else f"the mean NDCG {num(ndcg)}, ")
    )


def build(ctx: ReportContext) -> Section:
    df = ctx.frame("report_overview")
    rows = df.to_dicts()
    per_run = [r for r in rows if r["run_id"] is not None]
    total = next(r for r in rows if r["run_id"] is None)
    table = Table(
        columns=[
            "run",
            "prompts",
            "rollouts",
            "success rate",
            "mean judge",
            "mean NDCG",
            "mean reward",
            "mean turns",
            *TERMINATIONS,
            "API cost (USD)",
        ],
        rows=[
            [
                r["run_id"] if r["run_id"] is not None else "all runs",
                r["prompts"],
                r["rollouts"],
                pct(r["success_rate"]),
                r["mean_judge"],
                r["mean_ndcg"],
                r["mean_reward"],
                r["mean_turns"],
                *(r[t] for t in TERMINATIONS),
                "unknown" if r["cost_usd"] is None else f"{r['cost_usd']:,.2f}",
            ]
            for r in [*per_run, total]
        ],
        caption=f"Success: judge ≥ {ctx.cfg.success_threshold:g} with the format gate passed; "
        "the rate is over judged rollouts.",
    )
    fig = go.Figure(
        [
            go.Bar(
                name=t,
                y=[figures.label(r["run_id"]) for r in per_run],
                x=[r[t] for r in per_run],
                orientation="h",
                marker_color=c,
            )
            for t, c in TERMINATIONS.items()
            if any(r[t] for r in per_run)
        ]
    )
    fig.update_layout(
        barmode="stack",
        title="How rollouts ended",
        xaxis_title="rollouts",
        yaxis={"autorange": "reversed"},
        legend={"traceorder": "normal"},
    )
    height = 140 + 28 * max(len(per_run), 1)
    cost = total["cost_usd"]
    reading = (
        f"{plural(len(per_run), 'run')}, {plural(total['prompts'], 'distinct prompt')} and "
        f"{plural(total['rollouts'], 'rollout')}. "
        + _scores(total)
        + (
            f"with {num(total['mean_turns'], 1)} turns per rollout. "
            if total["mean_turns"] is not None
            else "and no rollout carries parsed turns. "
        )
        + f"Of all rollouts, {num(total['complete'])} stopped on their own, "
        f"{num(total['max_turns'])} hit the turn limit, {num(total['invalid'])} ended on an "
        f"invalid action and {num(total['error'])} in an error"
        + (
            f"; how the other {num(total['unknown'])} ended is unknown (their logs do not "
            "record it). "
            if total["unknown"]
            else ". "
        )
        + (
            f"The logged API cost is ${cost:,.2f}."
            if cost is not None
            else "No API cost was logged (extra.cost_usd)."
        )
    )
    return Section(
        id="overview",
        title="Overview",
        reading=reading,
        blocks=[
            table,
            figures.chart_or_note(
                fig,
                "fig-overview-termination",
                height=height,
                empty="No rollout in the selection: nothing to chart.",
            ),
        ],
        stats={"runs": per_run, "total": {k: v for k, v in total.items() if k != "run_id"}},
    )
