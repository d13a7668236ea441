"""The rank of the first golden page in Python: the reference the report's SQL column
``first_golden_rank`` is checked against (over ``ddai.pipelines.records.metrics.dedupe``)."""

from __future__ import annotations

from ddai.pipelines.records.metrics import dedupe


def first_golden_rank(retrieved: list[str], golden: list[str]) -> int | None:
    """1-based rank of the first golden page among the distinct retrieved pages, else None."""
    gold = set(golden or [])
    for i, page in enumerate(dedupe(retrieved)):
        if page in gold:
            return i + 1
    return None
