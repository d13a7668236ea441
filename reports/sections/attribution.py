"""Section: failure attribution of low-scoring prompts (seed 000, 9.8): search failure, generator
bottleneck or likely wrong ground truth, per run, with the prompt lists to download.

Reads the query layer's ``failure_attribution_at`` (``sql/failure_attribution.sql``); runs
without judge scores or pages are named and left out, and with none left the section is one
sentence, no chart.
"""

from __future__ import annotations

from ddai.pipelines.analyses import attribution, carries
from ddai.pipelines.analyses.flags import load_flags
from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Block, Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.downloads import csv_download_in_parts
from ddai.reports.formatting import pct

LABELS = {
    "wrong_gt": "likely wrong ground truth",
    "generator_bottleneck": "generator bottleneck",
    "search_failure": "search failure",
}
COLUMNS = [
    "run_id",
    "uid",
    "class",
    "reason",
    "mean_score",
    "rollouts",
    "golden_rollouts",
    "golden_rejected",
    "failed_without_golden",
    "agreed",
    "agreed_answer",
    "review_verdict",
    "question",
    "reference_answer",
]


def _chart(ctx: ReportContext, summary: dict) -> go.Figure:
    runs = list(summary)
    fig = go.Figure(
        [
            go.Bar(
                name=label,
                x=[figures.label(r) for r in runs],
                y=[summary[r]["counts"][cls] for r in runs],
                marker_color=figures.color(i),
            )
            for i, (cls, label) in enumerate(LABELS.items())
        ]
    )
    fig.update_layout(
        barmode="stack", title="Low-scoring prompts by failure cause", yaxis_title="prompts"
    )
    return fig


def _lack(ctx: ReportContext, runs: list[str]) -> str:
    """Why ``runs`` are left out, in the capability table's words where it has them."""
    notes = []
    for cap in ("judge", "pages"):
        missing = [r for r in runs if r in ctx.caps and not ctx.caps[r].has(cap)]
        if missing:
            notes.append(ctx.lack_note(cap, "the failure attribution", missing))
    return " ".join(notes) or (
        f"Run{'s' if len(runs) > 1 else ''} {', '.join(runs)} carr{'y' if len(runs) > 1 else 'ies'}"
        " no judge scores or no retrieved and reference pages, so the failure attribution "
        "leaves them out."
    )


def _empty(reason: str) -> Section:
    return Section(
        id="attribution",
        title="Failure attribution",
        reading=reason,
        blocks=[],
        stats={"runs": {}, "skipped": {}},
    )


def build(ctx: ReportContext) -> Section:
    cfg = attribution.AttributionConfig(threshold=ctx.cfg.success_threshold, flags=ctx.cfg.flags)
    counts = {r: c for r, c in carries.carries(ctx.con, "report_carries").items() if r in ctx.runs}
    ok = [r for r, c in counts.items() if all(n.test(c) for n in attribution.NEEDS)]
    skipped = sorted(set(counts) - set(ok))
    if not ok:
        return _empty("No failure attribution. " + _lack(ctx, skipped))
    load_flags(ctx.con, cfg.flags)
    df = attribution.rows(ctx.con, cfg).filter(pl.col("run_id").is_in(ok))
    unmatched = attribution.unmatched_flags(attribution.flagged_uids(ctx.con), df, cfg.flags)
    summary = attribution.summarize(df)
    low = df.filter(pl.col("low")).select(COLUMNS)
    n_low = low.height
    totals = {c: sum(s["counts"][c] for s in summary.values()) for c in LABELS}
    reading = (
        f"A prompt is low-scoring when its mean score (reward, else judge) is at or under "
        f"{cfg.score_max:g}. Each one gets the likeliest cause, checked in this order: a likely "
        "wrong ground truth (a review flag, or at least "
        f"{cfg.agree_min} rollouts that retrieved a golden page agree on an answer the judge "
        "rejected), a generator bottleneck (most failed rollouts retrieved a golden page and "
        "were judged wrong), else a search failure (most failed rollouts retrieved no golden "
        "page). "
        + (
            f"Of {n_low:,} low-scoring prompt-runs, {totals['search_failure']:,} are search "
            f"failures, {totals['generator_bottleneck']:,} generator bottlenecks and "
            f"{totals['wrong_gt']:,} likely wrong ground truths: the first want more search "
            "budget, the second a better generator, the third a ground-truth review before the "
            "next round."
            if n_low
            else "No prompt scored that low."
        )
        + (f" {_lack(ctx, skipped)}" if skipped else "")
        + (f" {unmatched}." if unmatched else "")
    )
    blocks: list[Block] = []
    if n_low:
        blocks.append(figures.to_block(_chart(ctx, summary), "fig-attribution-classes"))
    blocks.append(
        Table(
            columns=["run", "prompts", "low-scoring", *LABELS.values()],
            rows=[
                [
                    run,
                    s["prompts"],
                    s["low"],
                    *[
                        f"{s['counts'][c]:,} ({pct(s['counts'][c] / s['low'])})" if s["low"] else 0
                        for c in LABELS
                    ],
                ]
                for run, s in summary.items()
            ],
        )
    )
    if n_low:
        # by cause and score, as the table below: the table is the list's first rows, and each
        # cause's rows are one stretch of it, which its own link cuts out in the page
        low = low.sort(["class", "mean_score", "uid", "run_id"])
        blocks += csv_download_in_parts(
            "All low-scoring prompts with their cause",
            "failure_attribution.csv",
            low,
            "class",
            {
                c: (f"Prompts: {label}", f"attribution_{c}.csv")
                for c, label in sorted(LABELS.items())
            },
        )
        top = low.head(ctx.cfg.top)
        blocks.append(
            Table(
                columns=["run", "uid", "cause", "why", "mean score", "question", "reference"],
                rows=[
                    [
                        r["run_id"],
                        r["uid"],
                        LABELS[r["class"]],
                        r["reason"],
                        r["mean_score"],
                        r["question"],
                        r["reference_answer"],
                    ]
                    for r in top.to_dicts()
                ],
                caption=f"First {top.height} of {n_low:,} low-scoring prompts by cause and score; "
                "the CSV links hold them all.",
            )
        )
    else:
        blocks.append(Note("No prompt scored at or under the line: nothing to attribute."))
    return Section(
        id="attribution",
        title="Failure attribution",
        reading=reading,
        blocks=blocks,
        stats={"runs": summary, "skipped": skipped, "score_max": cfg.score_max},
    )
