"""Value curves: where expected success drops within trajectories, by turn and by action type.

Reads ``turns[].value`` as ``ddai value score`` writes it (and, for ``--value-sft DIR``, the joint
stage's per-token weights: ``value_joint``): the value head's expected success
before each turn. A turn's *change* is the next valued turn's value (or, after the last one, the
outcome) minus its own: what the turn's action and the environment's answer did to the expected
success. Runs without values are named, with the command that fills them.
"""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num, pct, share
from ddai.reports.sections import value_joint

LIKELY = 0.5
"""A value at or above this counts as a likely success (values estimate P(success))."""


def _by_turn(ctx: ReportContext, df: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    for run, part in ctx.by_run(df):
        for outcome, dash in (("success", "solid"), ("failure", "dash")):
            sub = part.filter(pl.col("outcome") == outcome).sort("turn_idx")
            if not sub.height:
                continue
            fig.add_trace(
                go.Scatter(
                    name=f"{figures.label(run)}: {outcome}",
                    x=sub["turn_idx"].to_list(),
                    y=sub["mean_value"].to_list(),
                    mode="lines+markers",
                    line={"color": ctx.color(run), "dash": dash},
                    customdata=sub["turns"].to_list(),
                    hovertemplate="turn %{x}: mean value %{y:.3f} over %{customdata} turns",
                )
            )
    fig.update_layout(
        title="Expected success before each turn (solid: rollouts that succeeded, dashed: failed)",
        xaxis={"title": "turn", "dtick": 1},
        yaxis_title="mean value",
    )
    return fig


def _by_action(ctx: ReportContext, df: pl.DataFrame) -> go.Figure:
    fig = go.Figure(
        [
            go.Bar(
                name=figures.label(run),
                x=part["action"].to_list(),
                y=part["mean_change"].to_list(),
                marker_color=ctx.color(run),
                customdata=part["turns"].to_list(),
                hovertemplate="%{x}: mean change %{y:.3f} over %{customdata} turns",
            )
            for run, part in ctx.by_run(df)
        ]
    )
    fig.update_layout(
        barmode="group",
        title="Change in expected success caused by each action type",
        xaxis={"title": "action", "type": "category"},
        yaxis_title="mean change in value",
    )
    return fig


def _table(ctx: ReportContext, df: pl.DataFrame) -> Table:
    rows: list[list[Any]] = []
    for run, part in ctx.by_run(df):
        for r in part.iter_rows(named=True):
            rows.append(
                [
                    run,
                    r["action"],
                    num(r["turns"]),
                    num(r["mean_before"]),
                    num(r["mean_change"]),
                    f"{num(r['flips_down'])} ({pct(share(r['flips_down'], r['turns']))})",
                    f"{num(r['flips_up'])} ({pct(share(r['flips_up'], r['turns']))})",
                ]
            )
    return Table(
        columns=[
            "run",
            "action",
            "turns",
            "value before",
            "mean change",
            "likely success → likely failure",
            "likely failure → likely success",
        ],
        rows=rows,
        caption=f"A value ≥ {LIKELY} counts as a likely success.",
    )


def build(ctx: ReportContext) -> Section:
    # The joint stage's TD weights (`--value-sft DIR`) stand with or without valued turns.
    joint_blocks, joint_stats = value_joint.blocks(list(ctx.cfg.value_sft))
    if not ctx.cfg.value_sft:
        joint_blocks = []
    section = _curves(ctx)
    section.blocks.extend(joint_blocks)
    if ctx.cfg.value_sft:
        section.stats["joint"] = joint_stats
    return section


def _curves(ctx: ReportContext) -> Section:
    # No valued turn (the common case before `ddai value score`; report_facts counts them): the
    # value queries would scan every turn again to find nothing.
    if ctx.valued_turns:
        by_action = ctx.frame("report_value_by_action", likely=LIKELY)
        by_turn = ctx.frame("report_value_by_turn")
    else:
        by_action = by_turn = pl.DataFrame()
    valued_runs = [run for run, _ in ctx.by_run(by_action)] if by_action.height else []
    missing = [r for r in ctx.runs if r not in valued_runs]
    n_turns = int(by_action["turns"].sum()) if by_action.height else 0
    reading = (
        "Where expected success changes within a trajectory, from the value head's estimate before "
        "each turn (written by `ddai value score`). The curve shows the mean value by turn for "
        "rollouts that ended in success and in failure: where they part is where trajectories are "
        "won or lost. The bars and table attribute each turn's change (the next turn's value, or "
        "the outcome after the last one, minus its own) to the action it took: a search or crop "
        "with a negative mean change tends to turn likely successes into failures. With "
        "`--value-sft DIR`, the joint stage's per-token TD weights follow: their mean and the "
        "share of tokens the clip bounds cut, per training step."
    )
    stats: dict[str, Any] = {"turns_valued": n_turns, "runs_without_values": missing}
    if not n_turns:
        return Section(
            id="value",
            title="Value curves",
            reading=reading,
            blocks=[
                Note(
                    "No turn has a value yet. Train a value head (`ddai train value --out-dir DIR`), "
                    "then write its estimates into these runs with `ddai value score --checkpoint DIR`."
                )
            ],
            stats=stats,
        )
    blocks: list[Any] = [
        figures.to_block(_by_turn(ctx, by_turn), "fig-value-by-turn"),
        figures.to_block(_by_action(ctx, by_action), "fig-value-by-action"),
        _table(ctx, by_action),
    ]
    if missing:
        blocks.append(
            Note(f"Runs without values (run `ddai value score` on them): {', '.join(missing)}.")
        )
    stats["by_action"] = {
        run: {
            r["action"]: {k: v for k, v in r.items() if k not in ("run_id", "action")}
            for r in part.iter_rows(named=True)
        }
        for run, part in ctx.by_run(by_action)
    }
    stats["by_turn"] = {
        run: [{k: v for k, v in r.items() if k != "run_id"} for r in part.iter_rows(named=True)]
        for run, part in ctx.by_run(by_turn)
    }
    return Section(id="value", title="Value curves", reading=reading, blocks=blocks, stats=stats)
