"""Section 7, run comparison (``--compare RUN_A RUN_B``): the behaviour-shift table, per-prompt
deltas (which prompts got better or worse) and the two runs' distributions side by side.

Runs usually differ in more than one thing (checkpoint, data, max_turns), so the deltas are
observed shifts, not causes.
"""

from __future__ import annotations

from typing import Any

from plotly.subplots import make_subplots

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import MISSING, num, pct
from ddai.reports.sections.behaviour import METRICS

OUTCOME_METRICS: tuple[tuple[str, str, Any], ...] = (
    ("prompts", "prompts", num),
    ("rollouts", "rollouts", num),
    ("success_rate", "success rate", pct),
    ("mean_judge", "mean judge", num),
    ("mean_ndcg", "mean NDCG", num),
    ("mean_reward", "mean reward", num),
)


def _delta(a: Any, b: Any, fmt: Any) -> str:
    if a is None or b is None:
        return MISSING
    d = b - a
    if fmt is pct:
        return f"{100 * d:+.1f} pp"
    return f"{d:+,}" if isinstance(d, int) else f"{d:+.3f}"


def _shift_table(a: str, b: str, rows: dict[str, dict[str, Any]]) -> tuple[Table, dict[str, Any]]:
    out, stats = [], {}
    outcome_keys = {k for k, _, _ in OUTCOME_METRICS}
    for key, label, fmt in (*OUTCOME_METRICS, *METRICS):
        va, vb = rows[a].get(key), rows[b].get(key)
        stats[key] = {"a": va, "b": vb}
        if va is None and vb is None and key not in outcome_keys:
            continue  # neither run measures it (e.g. no parsed turns): a row of dashes says nothing
        out.append([label, fmt(va), fmt(vb), _delta(va, vb, fmt)])
    return Table(columns=["", a, b, "B − A"], rows=out), stats


def _distributions(
    ctx: ReportContext, a: str, b: str, deltas: pl.DataFrame, *, searches: bool
) -> go.Figure:
    """Success rates per prompt, their change and (``searches``: a run has turns) searches."""
    titles = ["success rate per prompt", "change in success rate (B − A)"]
    fig = make_subplots(
        rows=1,
        cols=3 if searches else 2,
        subplot_titles=[*titles, "searches per rollout"][: 3 if searches else 2],
    )
    rates = deltas["success_a"].drop_nulls().to_list() + deltas["success_b"].drop_nulls().to_list()
    width, offsets = figures.bar_slots(rates, 2)
    for i, (run, col) in enumerate(((a, "success_a"), (b, "success_b"))):
        counts = deltas.filter(pl.col(col).is_not_null()).group_by(col).len().sort(col)
        fig.add_trace(
            go.Bar(
                name=figures.label(run),
                x=counts[col].to_list(),
                y=counts["len"].to_list(),
                width=width,
                offset=offsets[i],
                marker_color=ctx.color(run),
                legendgroup=run,
                hovertemplate="success rate %{x:.3g}: %{y:,} prompts",
            ),
            row=1,
            col=1,
        )
    d = deltas.filter(pl.col("success_delta").is_not_null())
    fig.add_trace(
        go.Histogram(
            x=d["success_delta"].to_list(),
            xbins={"start": -1.05, "end": 1.05, "size": 0.1},
            name="change per prompt (B − A)",
            marker_color=figures.color(5),
        ),
        row=1,
        col=2,
    )
    actions = ctx.frame("report_action_hist").filter(pl.col("action") == "search")
    for i, run in enumerate((a, b) if searches else ()):
        part = actions.filter(pl.col("run_id") == run)
        total = part["rollouts"].sum() or 1
        fig.add_trace(
            go.Bar(
                name=figures.label(run),
                x=part["per_rollout"].to_list(),
                y=[n / total for n in part["rollouts"]],
                width=0.4,  # side by side (the figure overlays bars: their offsets are explicit)
                offset=-0.4 + 0.4 * i,
                marker_color=ctx.color(run),
                legendgroup=run,
                showlegend=False,
            ),
            row=1,
            col=3,
        )
    fig.update_xaxes(figures.fraction_axis("success rate"), row=1, col=1)
    fig.update_layout(barmode="overlay", title=f"{figures.label(a)} (A) vs {figures.label(b)} (B)")
    fig.update_yaxes(title_text="prompts", row=1, col=1)
    fig.update_yaxes(title_text="prompts", row=1, col=2)
    if searches:
        fig.update_yaxes(title_text="share of rollouts", tickformat=".0%", row=1, col=3)
    return fig


def _prompt_table(rows: list[dict[str, Any]], caption: str) -> Table:
    return Table(
        columns=["uid", "success A", "success B", "Δ", "score A", "score B", "question"],
        rows=[
            [
                r["uid"],
                pct(r["success_a"]),
                pct(r["success_b"]),
                f"{100 * r['success_delta']:+.1f} pp",
                r["score_a"],
                r["score_b"],
                r["question"],
            ]
            for r in rows
        ],
        caption=caption,
    )


def build(ctx: ReportContext) -> Section:
    title = "Run comparison"
    if ctx.cfg.compare is None:
        return Section(
            id="compare",
            title=title,
            reading="Compares two runs prompt by prompt and behaviour by behaviour.",
            blocks=[Note("No comparison asked for: pass --compare RUN_A RUN_B.")],
            stats={"compared": None},
        )
    a, b = ctx.cfg.compare
    outcome = {r["run_id"]: r for r in ctx.frame("report_overview").to_dicts() if r["run_id"]}
    behaviour = {r["run_id"]: r for r in ctx.frame("report_behaviour_runs").to_dicts()}
    # Outcome keys from the overview (all rollouts), behaviour keys from the behaviour query
    # (rollouts with parsed turns): both name a `rollouts` count and a `max_turns`.
    keep = [k for k, _, _ in OUTCOME_METRICS]
    merged = {
        run: {**behaviour.get(run, {}), **{k: outcome.get(run, {}).get(k) for k in keep}}
        for run in (a, b)
    }
    shift, shift_stats = _shift_table(a, b, merged)
    deltas = ctx.frame("report_compare_prompts", run_a=a, run_b=b)
    scored = deltas.filter(pl.col("success_delta").is_not_null())
    better = scored.filter(pl.col("success_delta") > 0).sort(
        ["success_delta", "uid"], descending=[True, False]
    )
    worse = scored.filter(pl.col("success_delta") < 0).sort(["success_delta", "uid"])
    n_same = scored.height - better.height - worse.height
    top = ctx.cfg.top
    no_turns = [r for r in (a, b) if r in ctx.lacking("turns")]
    searches = len(no_turns) < 2
    blocks = [
        shift,
        figures.chart_or_note(
            _distributions(ctx, a, b, deltas, searches=searches),
            "fig-compare-distributions",
            empty="Neither run has a prompt judged in both: no distributions to compare.",
        ),
        _prompt_table(better.head(top).to_dicts(), f"Prompts that got better (top {top})"),
        _prompt_table(worse.head(top).to_dicts(), f"Prompts that got worse (top {top})"),
    ]
    if no_turns:
        blocks.insert(
            1, Note(ctx.lack_note("turns", "behaviour rows and searches per rollout", no_turns))
        )
    no_judge = [r for r in (a, b) if r in ctx.lacking("judge")]
    if no_judge:
        # success needs a judge score: the per-prompt changes and their tables stay empty
        blocks.insert(-2, Note(ctx.lack_note("judge", "per-prompt success changes", no_judge)))
    sa, sb = merged[a].get("success_rate"), merged[b].get("success_rate")
    reading = (
        f"Run {a} (A) against run {b} (B). The table lists each outcome and behaviour measure in "
        f"both runs and the change; the success rate moved from {pct(sa)} to {pct(sb)}. Of the "
        f"{deltas.height:,} prompts both runs played, {better.height:,} got better, "
        f"{worse.height:,} got worse and {n_same:,} stayed the same"
        + (
            f" ({deltas.height - scored.height:,} have no success rate in one of the runs)"
            if deltas.height > scored.height
            else ""
        )
        + ". Runs usually differ in "
        "checkpoint, data and budget at once, so read these as observed shifts, not causes."
    )
    return Section(
        id="compare",
        title=title,
        reading=reading,
        blocks=blocks,
        stats={
            "compared": [a, b],
            "shift": shift_stats,
            "prompts": {
                "common": deltas.height,
                "better": better.height,
                "worse": worse.height,
                "same": n_same,
            },
            "better": better["uid"].head(top).to_list(),
            "worse": worse["uid"].head(top).to_list(),
        },
    )
