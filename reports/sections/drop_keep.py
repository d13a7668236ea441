"""Section: zero-variance GRPO groups and the prompts to drop or keep, as downloadable CSV lists.

A group whose rollouts all scored the same teaches nothing (zero advantage); a prompt whose every
group was constant is a drop candidate, with why (``sql/zero_variance.sql``).
"""

from __future__ import annotations

from ddai.pipelines.records.deps import pl
from ddai.pipelines.store import query
from ddai.reports.blocks import Block, Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.downloads import csv_download
from ddai.reports.formatting import pct

REASONS = ("always_zero", "always_full", "constant")


def build(ctx: ReportContext) -> Section:
    decisions = query.run_frame(ctx.con, "SELECT * FROM drop_keep")
    groups = query.run_frame(ctx.con, "SELECT * FROM zero_variance_groups")
    if decisions.height == 0:
        return Section(
            id="drop-keep",
            title="Zero-variance groups: drop or keep",
            reading="No drop/keep lists: no run here has a GRPO group of two or more scored "
            "rollouts (one prompt's rollouts at one step).",
            stats={"runs": {}},
        )
    per_run = {}
    for run, part in ctx.by_run(decisions):
        per_run[run] = {
            "prompts": part.height,
            "groups": int(part["groups"].sum()),
            "zero_variance_groups": int(part["zero_variance_groups"].sum()),
            "keep": part.filter(pl.col("decision") == "keep").height,
            **{r: part.filter(pl.col("reason") == r).height for r in REASONS},
        }
    keep = decisions.filter(pl.col("decision") == "keep")
    drop = decisions.filter(pl.col("decision") == "drop")
    blocks: list[Block] = [
        Table(
            columns=[
                "run",
                "prompts",
                "GRPO groups",
                "zero variance",
                "keep",
                "drop: always 0",
                "drop: always full",
                "drop: constant",
            ],
            rows=[
                [
                    run,
                    s["prompts"],
                    s["groups"],
                    f"{s['zero_variance_groups']:,} ({pct(s['zero_variance_groups'] / s['groups'])})",
                    s["keep"],
                    s["always_zero"],
                    s["always_full"],
                    s["constant"],
                ]
                for run, s in per_run.items()
            ],
            caption="A prompt is kept when any of its groups had reward variance.",
        ),
        csv_download("Prompts to drop (with why)", "prompts_drop.csv", drop),
        csv_download("Prompts to keep", "prompts_keep.csv", keep),
        csv_download(
            "Zero-variance groups (run, step, uid, score)", "zero_variance_groups.csv", groups
        ),
    ]
    if left_out := [r for r in ctx.runs if r not in per_run]:
        # left out of the table and the counts: named, as the outcomes section does
        why = (
            "no GRPO group of two or more scored rollouts (one prompt's rollouts at one step, "
            "scored by reward or judge)"
        )
        fix = "log every rollout of each group (n_agent per prompt) with its reward"
        blocks.insert(1, Note(ctx.runs_note(left_out, why, "drop/keep decisions", fix)))
    zero = drop.filter(pl.col("reason") == "always_zero").height
    reading = (
        f"Of {decisions.height:,} prompt-runs with a GRPO group of two or more scored rollouts, "
        f"{keep.height:,} had reward variance in at least one group and are kept; "
        f"{drop.height:,} never did and are drop candidates: {zero:,} always scored 0 (out of "
        "reach for now, or a wrong ground truth: review them before dropping), the rest always "
        "scored the same above 0. The lists below download as CSV."
    )
    return Section(
        id="drop-keep",
        title="Zero-variance groups: drop or keep",
        reading=reading,
        blocks=blocks,
        stats={"runs": per_run, "zero_variance_groups": groups.height},
    )
