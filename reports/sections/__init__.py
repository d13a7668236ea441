"""The report's sections, in page order. A section is a module with ``build(ctx) -> Section``;
adding one is a new module plus one line here."""

from __future__ import annotations

from ddai.reports.blocks import SectionBuilder
from ddai.reports.sections import (
    attribution,
    behaviour,
    browser,
    compare,
    drop_keep,
    evaluation,
    funnel,
    hallucination,
    judge_ndcg,
    outcomes,
    overview,
    reward_latency,
    training,
    value_curves,
)

SECTIONS: tuple[tuple[str, SectionBuilder], ...] = (
    ("overview", overview.build),
    ("funnel", funnel.build),
    ("per-prompt outcomes", outcomes.build),
    ("judge vs NDCG", judge_ndcg.build),
    ("hallucination suspects", hallucination.build),
    ("search behaviour", behaviour.build),
    ("run comparison", compare.build),
    ("trajectory browser", browser.build),
    # Value-head views (issue 10) come after the eight core sections, keeping their numbering.
    ("value curves", value_curves.build),
    # DDAI's round analyses (issue 13), after the numbered core sections as well.
    ("failure attribution", attribution.build),
    ("reward latency and coverage", reward_latency.build),
    ("zero-variance groups: drop or keep", drop_keep.build),
    # What the optimizer did (issue 22): reward and clip ratio per step of runs trained here.
    ("training dynamics", training.build),
    # `ddai eval` runs by their test set's categories (issue 30).
    ("evaluation by category", evaluation.build),
)

# Started first when sections are built concurrently (``reports/build.py``): the longest at 1M
# rollouts (bench/README.md, "The report's sections built concurrently"), so that none of them
# starts last and runs alone while the other core idles.
LONGEST = ("trajectory browser", "failure attribution", "zero-variance groups: drop or keep")
