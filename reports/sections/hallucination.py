"""Section 5, hallucination suspects: judged correct, yet no retrieved page is golden.

Under a judge-only reward these rollouts are paid for answers the evidence may not hold (the
frozen generator's own knowledge). DDAI found about half of such cases were not hallucinations
(another page of the same document held the fact), so the same-document count is shown beside.
"""

from __future__ import annotations

from ddai.pipelines.records.deps import go
from ddai.reports import figures
from ddai.reports.blocks import Figure, Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num, pct

_NO_REFERENCE = "not counted: no reference pages"
_WHY = "no judged rollout with reference pages (no retrieved page can be golden)"
_FIX = (
    "ingest a log that names each prompt's reference pages (DDAI's `reference_basenames`, or a "
    "`reference_pages` column)"
)


def build(ctx: ReportContext) -> Section:
    cfg = ctx.cfg
    per_run = {r["run_id"]: r for r in ctx.frame("report_hallucination_runs").to_dicts()}
    # a run without judge scores has nothing counted: named by the lack note, not a row of zeros
    scored = {run: r for run, r in per_run.items() if r["judged"]}
    # nor one whose judged rollouts carry no reference pages (no page can be golden): its row
    # says "not counted" and a note names it, rather than "0 suspects, 0.0%"
    unreferenced = [run for run, r in scored.items() if not r["judged_with_reference"]]
    judged = {run: r for run, r in scored.items() if run not in unreferenced}
    ranked = ctx.frame("report_hallucination_prompts").to_dicts()
    fig = go.Figure(
        [
            go.Bar(
                name="no page of the reference document",
                x=[figures.label(run) for run in judged],
                y=[(r["suspects"] - r["suspects_same_doc"]) / r["judged"] for r in judged.values()],
                marker_color=figures.color(3),
            ),
            go.Bar(
                name="another page of the reference document",
                x=[figures.label(run) for run in judged],
                y=[r["suspects_same_doc"] / r["judged"] for r in judged.values()],
                marker_color=figures.color(0),
            ),
        ]
    )
    fig.update_layout(
        barmode="stack",
        title=f"Hallucination suspects (judge ≥ {cfg.judge_high:g}, no golden page), "
        "share of judged rollouts",
        yaxis={"tickformat": ".1%"},
    )
    runs_table = Table(
        columns=[
            "run",
            "judged",
            f"correct (judge ≥ {cfg.judge_high:g})",
            "suspects",
            "of which same document",
            "share of judged",
            "share of correct",
        ],
        rows=[
            [
                run,
                r["judged"],
                r["correct"],
                r["suspects"],
                r["suspects_same_doc"],
                pct(r["share_of_judged"]),
                pct(r["share_of_correct"]),
            ]
            if run in judged
            else [run, r["judged"], *[_NO_REFERENCE] * 5]
            for run, r in scored.items()
        ],
    )
    none = (
        "No hallucination suspect in these runs (every answer judged correct retrieved a golden "
        "page, or no rollout has reference pages): nothing to chart."
    )
    if not scored:
        none = "No rollout of these runs has a judge score: no suspect to chart."
    elif not judged:
        none = "No judged rollout of these runs has reference pages: no suspect to chart."
    blocks: list = [
        figures.chart_or_note(fig, "fig-hallucination-share", empty=none),
        *(Note(t) for t in ctx.lack_notes(("judge", "pages"), "hallucination suspects")),
        *(
            [Note(ctx.runs_note(unreferenced, _WHY, "hallucination suspects", _FIX))]
            if unreferenced
            else []
        ),
        *([runs_table] if scored else []),
    ]
    if ranked:
        blocks.append(
            Table(
                columns=[
                    "run",
                    "uid",
                    "suspects",
                    "rollouts",
                    "share",
                    "same document",
                    "question",
                    "reference answer",
                ],
                rows=[
                    [
                        r["run_id"],
                        r["uid"],
                        r["suspects"],
                        r["rollouts"],
                        pct(r["share"]),
                        r["suspects_same_doc"],
                        r["question"],
                        r["reference_answer"],
                    ]
                    for r in ranked
                ],
                caption=f"Prompts ranked by suspect rollouts (top {cfg.top}); filter the "
                "trajectory browser by class hallucination_suspect to read them.",
            )
        )
    elif isinstance(blocks[0], Figure):
        blocks.append(Note("No hallucination suspects in these runs."))
    n = sum(r["suspects"] for r in per_run.values())
    same = sum(r["suspects_same_doc"] for r in per_run.values())
    correct = sum(r["correct"] for r in per_run.values())
    reading = (
        f"A rollout is a suspect when the judge accepted its answer (≥ {cfg.judge_high:g}) although "
        "none of the pages it retrieved is a golden page: the generator may have answered from its "
        "own knowledge, and a judge-only reward pays for it. "
        + (
            f"{num(n)} of {num(correct)} correct rollouts with reference pages are suspects "
            f"({pct(n / correct) if correct else '—'}); {num(same)} of them retrieved another page "
            "of the reference document, which often holds the same fact, so the rest are the ones "
            "to read first. The list ranks prompts by how often this happened."
            if judged
            # nothing counted: say so once rather than recite the counts as zeros
            else "No judged rollout of these runs has reference pages, so no suspect is counted "
            "here."
            if scored
            else "No rollout of these runs has a judge score, so none is counted here."
        )
    )
    return Section(
        id="hallucination",
        title="Hallucination suspects",
        reading=reading,
        blocks=blocks,
        stats={"runs": per_run, "ranked": ranked},
    )
