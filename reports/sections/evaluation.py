"""Section: evaluation runs (``ddai eval``) scored overall and by their test set's categories.

An eval run's rollouts carry their prompt's category values (``extra.eval_categories``: data
source, reason type, content type, as the set labels them); the scores are
``ddai.pipelines.analyses.evaluation.breakdown``'s (exact-match accuracy, mean judge over judged rollouts, mean
NDCG), the same numbers ``ddai eval`` printed.
"""

from __future__ import annotations

import json

from ddai.pipelines.analyses import evaluation
from ddai.reports.blocks import Block, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num

COLUMNS = ["category", "value", "prompts", "rollouts", "accuracy", "judge", "not judged", "NDCG"]


def _cells(scores: dict) -> list:
    return [
        scores["prompts"],
        scores["rollouts"],
        num(scores["accuracy"]),
        num(scores["judge"]),
        scores["judge_missing"],
        num(scores["ndcg"]),
    ]


def build(ctx: ReportContext) -> Section:
    rows = ctx.frame("report_eval").to_dicts()
    if not rows:
        return Section(
            id="evaluation",
            title="Evaluation by category",
            reading="No evaluation run here: `ddai eval` logs a policy's rollouts over a test set "
            "with each prompt's categories, and this section breaks its scores down by them.",
            stats={"runs": {}},
        )
    per_run: dict[str, dict] = {}
    blocks: list[Block] = []
    for run in dict.fromkeys(r["run_id"] for r in rows):
        part = [
            {**r, "categories": json.loads(r["categories"])} for r in rows if r["run_id"] == run
        ]
        fields = list(dict.fromkeys(f for r in part for f in r["categories"]))
        table = evaluation.breakdown(part, fields)
        per_run[run] = table
        lines = [["all", "", *_cells(table["overall"])]]
        lines += [
            [field, scores["value"], *_cells(scores)]
            for field, values in table["by_category"].items()
            for scores in values
        ]
        blocks.append(
            Table(
                columns=COLUMNS,
                rows=lines,
                caption=f"{run}: accuracy is the normalized exact match of the generator's answer; "
                "judge is the mean over judged rollouts (not judged: unscorable ones).",
            )
        )
    reading = (
        f"{len(per_run)} evaluation run{'s' if len(per_run) > 1 else ''} "
        f"({', '.join(per_run)}), {len(rows):,} rollouts, scored overall and by the categories "
        "their test set labels (data source, reason type, content type)."
    )
    return Section(
        id="evaluation",
        title="Evaluation by category",
        reading=reading,
        blocks=blocks,
        stats={"runs": per_run},
    )
