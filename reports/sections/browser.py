"""Section 8, trajectory browser: a filterable table of sampled rollouts; a click opens the
transcript (thinks, actions, retrieved pages marked golden or not, answer, judge and NDCG).

Only a stratified sample of at most ``--browse-max`` rollouts is shipped (round-robin over run,
outcome and class: see ``sql/report_browser_sample.sql``), with each text cut at ``--text-max``
characters, as gzip-compressed JSON the page script unpacks and shows 50 rows at a time: 5,000
rollouts add about 1 MB and no page height.
"""

from __future__ import annotations

from collections import Counter

from ddai.reports.blocks import Partial, Section
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num
from ddai.reports.render import packed_json
from ddai.reports.transcript import transcript

OUTCOMES = ("success", "failure", "format_fail", "unjudged")
TAGS = (
    "same_doc_success",
    "no_reference_doc",
    "retrieval_ok_answer_wrong",
    "hallucination_suspect",
    "invalid_action",
    "forced_completion",
    "zero_search",
    "repeated_query",
)


def build(ctx: ReportContext) -> Section:
    cfg = ctx.cfg
    sample = ctx.frame("report_browser_sample") if cfg.browse_max else None
    rows = (
        [transcript(r, text_max=cfg.text_max) for r in sample.iter_rows(named=True)]
        if sample is not None
        else []
    )
    total = ctx.rollouts
    outcomes = Counter(r["outcome"] for r in rows)
    tags = Counter(t for r in rows for t in r["tags"])
    reading = (
        f"{num(len(rows))} of {num(total)} rollouts, sampled round-robin over run, outcome and "
        "class so that rare cases show up before common ones repeat. Filter by run, outcome or "
        "class, or search any text (question, answer, "
        "thinks, queries); click a row to read its transcript. Retrieved pages are marked golden "
        "(a reference page), same document (another page of the reference document) or other. "
        f"Texts longer than {cfg.text_max:,} characters are cut."
    )
    return Section(
        id="browser",
        title="Trajectory browser",
        reading=reading,
        blocks=[
            Partial(
                "browser.html",
                {
                    "data": packed_json(rows),
                    "shown": len(rows),
                    "runs": ctx.runs,
                    "outcomes": [o for o in OUTCOMES if outcomes[o]],
                    "tags": [t for t in TAGS if tags[t]],
                },
            )
        ],
        stats={
            "shown": len(rows),
            "rollouts": total,
            "outcomes": dict(outcomes),
            "tags": dict(tags),
        },
    )
