"""Section: reward latency and coverage per run and step, from the logs (seed 000, 9.7.1):
how long reward calls took (``extra.latency_s``), how many timed out or failed, and what share
of rollouts got a reward. Charts only where the logs carry the numbers; else one sentence.
"""

from __future__ import annotations

from ddai.pipelines.analyses import carries
from ddai.pipelines.analyses.streaming import step_log
from ddai.pipelines.records.deps import go, pl
from ddai.pipelines.store import query
from ddai.reports import figures
from ddai.reports.blocks import Block, Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num, pct


def _by_step(
    ctx: ReportContext, steps: pl.DataFrame, col: str, title: str, axis: dict
) -> go.Figure:
    fig = go.Figure(
        [
            go.Scatter(
                name=figures.label(run),
                x=part["step"].to_list(),
                y=part[col].to_list(),
                mode="lines+markers",
                marker_color=ctx.color(run),
            )
            for run, part in ctx.by_run(steps)
        ]
    )
    fig.update_layout(title=title, xaxis_title="step", yaxis=axis)
    return fig


def _left_out(ctx: ReportContext, per_run: dict[str, dict], stepped: pl.DataFrame) -> list[Block]:
    """Notes naming the runs the per-step charts leave out (no steps; no latency logged) when
    other runs are drawn; the table still has their totals."""
    notes: list[Block] = []
    drawn = set(stepped["run_id"].to_list())
    no_step = [r for r in per_run if r not in drawn]
    if drawn and no_step:
        notes.append(Note(ctx.lack_note("step", "its latency and coverage per step", no_step)))
    timed = set(stepped.filter(pl.col("with_latency") > 0)["run_id"].to_list())
    untimed = [r for r in per_run if r in drawn and r not in timed]
    if timed and untimed:
        notes.append(
            Note(
                ctx.runs_note(
                    untimed,
                    "no reward latency logged (extra.latency_s, DDAI's rm.flash.detail latency_s)",
                    "its latency per step",
                    "ingest a log that records each reward call's latency",
                )
            )
        )
    return notes


def build(ctx: ReportContext) -> Section:
    # Both grains from one pass over the log: the views analysis_latency_runs and reward_latency
    # each evaluate reward_latency_sets (JSON and percentiles over every rollout); split it here
    # the way they do.
    sets = query.run_frame(ctx.con, "SELECT * FROM reward_latency_sets")
    runs = sets.filter(pl.col("run_total") == 1).drop("step", "run_total").sort("run_id")
    steps = (
        sets.filter(pl.col("run_total") == 0)
        .drop("run_total")
        .sort(["run_id", "step"], nulls_last=False)
    )
    scored = runs.filter((pl.col("rewarded") > 0) | (pl.col("judged") > 0))
    if scored.height == 0:
        return Section(
            id="latency",
            title="Reward latency and coverage",
            reading="No reward latency or coverage: no run here logs rewards or judge scores.",
            stats={"runs": {}},
        )
    per_run = {r["run_id"]: r for r in scored.to_dicts()}
    for run, r in per_run.items():
        # the trainer's own step log (unified logs): how many rollouts each step generated
        expected = [
            v["expected_rollouts"]
            for v in step_log(ctx.cfg.logs, run).values()
            if "expected_rollouts" in v
        ]
        r["expected_rollouts"] = sum(expected) if expected else None
    timed = [r for r in per_run.values() if r["with_latency"]]
    stepped = steps.filter(pl.col("step").is_not_null() & pl.col("run_id").is_in(list(per_run)))
    blocks: list[Block] = []
    if timed and stepped.filter(pl.col("with_latency") > 0).height:
        blocks.append(
            figures.to_block(
                _by_step(
                    ctx,
                    stepped.filter(pl.col("with_latency") > 0),
                    "p90_latency_s",
                    "Reward latency per step (90th percentile)",
                    {"title": "seconds"},
                ),
                "fig-latency-p90",
            )
        )
    if stepped.height:
        blocks.append(
            figures.to_block(
                _by_step(
                    ctx,
                    stepped,
                    "coverage",
                    "Reward coverage per step (rollouts with a reward)",
                    {"title": "share of rollouts", "tickformat": ".0%", "range": [0, 1.05]},
                ),
                "fig-latency-coverage",
            )
        )
    blocks += _left_out(ctx, per_run, stepped)
    if unscored := [r for r in runs["run_id"].to_list() if r not in per_run]:
        # left out of the counts and the table: named, or the coverage reads as every run's
        why = "no reward and no judge score"
        what = "reward latency and coverage"
        blocks.append(Note(ctx.runs_note(unscored, why, what, carries.SCORES.fix)))
    blocks.append(
        Table(
            columns=[
                "run",
                "rollouts",
                "of expected",
                "rewarded",
                "coverage",
                "latency logged",
                "mean s",
                "p50 s",
                "p90 s",
                "p99 s",
                "max s",
                "errors",
                "timeouts",
            ],
            rows=[
                [
                    run,
                    r["rollouts"],
                    pct(r["rollouts"] / r["expected_rollouts"]) if r["expected_rollouts"] else "—",
                    r["rewarded"],
                    pct(r["coverage"]),
                    r["with_latency"],
                    r["mean_latency_s"],
                    r["p50_latency_s"],
                    r["p90_latency_s"],
                    r["p99_latency_s"],
                    r["max_latency_s"],
                    r["errors"],
                    r["timeouts"],
                ]
                for run, r in per_run.items()
            ],
            caption='Latency percentiles pool every rollout of the run. "of expected": rollouts '
            "in the logs / rollouts the trainer's step log says it generated (unified logs only).",
        )
    )
    worst = max(timed, key=lambda r: r["p99_latency_s"]) if timed else None
    rollouts = sum(r["rollouts"] for r in per_run.values())
    rewarded = sum(r["rewarded"] for r in per_run.values())
    timeouts = sum(r["timeouts"] for r in per_run.values())
    reading = (
        "DDAI's streaming reward waits a bounded time for each group's generator and judge calls; "
        "a call that runs late scores 0 or not at all. "
        f"{rewarded:,} of {rollouts:,} rollouts got a reward ({pct(rewarded / rollouts)}), "
        f"{timeouts:,} reward calls logged a timeout. "
        + (
            f"The slowest run's 99th percentile is {num(worst['p99_latency_s'], 2)} s "
            f"({worst['run_id']}); size the reward timeout above it."
            if worst
            else "No run logs the reward calls' latency (extra.latency_s), so no latency chart."
        )
        + ("" if stepped.height else " The logs carry no steps, so no per-step chart.")
    )
    return Section(
        id="latency",
        title="Reward latency and coverage",
        reading=reading,
        blocks=blocks,
        stats={"runs": per_run, "steps": stepped.to_dicts()},
    )
