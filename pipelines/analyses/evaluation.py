"""Evaluation by a test set's own categories (``ddai eval``; the report's evaluation section).

DDAI's overall test set (``hf_dataset_overall_test_set.py``: SlideVQA-test and ViDoSeek in verl's
RL shape) labels each prompt with ``data_source`` and, in ``extra_info``, ``reason_type`` and
``content_type``. ``set_categories`` finds which of those a set carries (``data_source`` and every
``*_type`` field, top-level or in ``extra_info``) and reads each prompt's values as written
(DDAI writes ``Nan`` for an unlabelled prompt: it stays a category of its own). ``breakdown``
scores rollouts overall and per category value (pure):

- ``accuracy``: normalized exact match of the generator's answer against the reference
  (``metrics.exact_match``: case, punctuation, articles and number formatting ignored; a missing
  answer scores 0). VQAv2's leave-one-out accuracy needs several human answers: against a test
  set's one reference it is always 0;
- ``judge``: the mean judge score over the rollouts that have one (``judge_missing`` counts the
  rest: an unscorable rollout is not a 0);
- ``ndcg``: the mean NDCG (a missing one counts 0: the rollout retrieved nothing scorable).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines.records import metrics, prompt_row

CATEGORY_KEY = "eval_categories"
"""The key of a logged eval rollout's ``extra`` holding its prompt's category values."""
NONE_LABEL = "(none)"


def _fields_of(row: dict[str, Any]) -> list[str]:
    names = [k for k in row if k == "data_source" or k.endswith("_type")]
    names += [k for k in prompt_row.extra_info(row) if k.endswith("_type") and k not in names]
    return names


def category_value(row: dict[str, Any], name: str) -> str:
    """A prompt row's value of category ``name``: the top-level column, else ``extra_info``'s."""
    value = row.get(name)
    if value is None:
        value = prompt_row.extra_info(row).get(name)
    return NONE_LABEL if value is None or value == "" else str(value)


def set_categories(
    rows: Sequence[dict[str, Any]], by: Sequence[str] | None = None
) -> tuple[list[str], dict[str, dict[str, str]]]:
    """``(fields, uid -> {field: value})`` of a test set's rows; ``by`` names the fields (each
    must be in the set), else every field the set carries. Uids as the trainer reads them."""
    found: list[str] = []
    for r in rows:
        found += [f for f in _fields_of(r) if f not in found]
    if by:
        missing = [f for f in by if f not in found]
        if missing:
            raise ValueError(
                f"--by {', '.join(missing)}: the test set has no such field; it carries: "
                f"{', '.join(found) or 'none'}"
            )
        found = list(by)
    cats = {
        prompt_row.uid_of(r, i): {f: category_value(r, f) for f in found}
        for i, r in enumerate(rows)
    }
    return found, cats


def read_set(path: str | os.PathLike[str], limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` rows of a test set in verl's RL shape (Parquet)."""
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: test set not found")
    table = pq.read_table(p)
    return (table.slice(0, limit) if limit else table).to_pylist()


def _scores(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    rows = list(rows)
    judged = [r["judge_score"] for r in rows if r.get("judge_score") is not None]
    acc = [
        metrics.exact_match(r.get("answer") or "", [r["reference_answer"]])
        if r.get("reference_answer")
        else 0.0
        for r in rows
    ]
    n = len(rows)
    return {
        "rollouts": n,
        "prompts": len({r["uid"] for r in rows}),
        "accuracy": sum(acc) / n if n else None,
        "judge": sum(judged) / len(judged) if judged else None,
        "judge_missing": n - len(judged),
        "ndcg": sum(r.get("ndcg") or 0.0 for r in rows) / n if n else None,
    }


def breakdown(rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> dict[str, Any]:
    """Scores overall and per value of each category field.

    ``rows``: rollouts with ``uid``, ``answer``, ``reference_answer``, ``judge_score``, ``ndcg``
    and ``categories`` (``{field: value}``). Returns ``{"overall": scores, "by_category": {field:
    [{"value": value, **scores}, ...]}}``, values in first-seen order (a list: values are data,
    kept as written, never JSON keys)."""
    by: dict[str, dict[str, list[dict[str, Any]]]] = {f: {} for f in fields}
    for r in rows:
        cats = r.get("categories") or {}
        for f in fields:
            by[f].setdefault(str(cats.get(f, NONE_LABEL)), []).append(r)
    return {
        "overall": _scores(rows),
        "by_category": {
            f: [{"value": v, **_scores(rs)} for v, rs in vals.items()] for f, vals in by.items()
        },
    }
