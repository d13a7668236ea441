"""A rollout row as the trajectory browser shows it (pure): texts cut to a bound, pages marked.

Nothing here escapes HTML: the browser template autoescapes every field, so model output stays
text however it is written.
"""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.metrics import doc_of

GOLDEN, SAME_DOC, OTHER = "golden", "same_doc", "other"


def clip(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def mark_pages(pages: list[str] | None, golden: list[str] | None) -> list[dict[str, str]]:
    """Each page with its mark: golden, same document as a golden page, or other."""
    gold = set(golden or [])
    gold_docs = {doc_of(p) for p in gold}
    return [
        {
            "page": p,
            "mark": GOLDEN if p in gold else SAME_DOC if doc_of(p) in gold_docs else OTHER,
        }
        for p in pages or []
    ]


def transcript(row: dict[str, Any], *, text_max: int) -> dict[str, Any]:
    """The browser's view of one rollout (a ``report_browser_sample`` row)."""
    golden = row.get("reference_pages")
    turns = [
        {
            "idx": t.get("idx"),
            "think": clip(t.get("think"), text_max),
            "action": t.get("action"),
            "arg": clip(t.get("arg"), text_max),
            "forced": bool(t.get("forced")),
            "error": t.get("error"),
            "retrieved": mark_pages(t.get("retrieved"), golden),
            "observation": clip(t.get("observation"), text_max),
            "value": t.get("value"),
        }
        for t in row.get("turns") or []
    ]
    return {
        "run_id": row["run_id"],
        "step": row.get("step"),
        "uid": row["uid"],
        "rollout_idx": row["rollout_idx"],
        "outcome": row["outcome"],
        "tags": list(row.get("tags") or []),
        "question": clip(row.get("question"), text_max),
        "reference_answer": clip(row.get("reference_answer"), text_max),
        "reference_pages": list(golden or []),
        "retrieved": mark_pages(row.get("retrieved_pages"), golden),
        "answer": clip(row.get("answer"), text_max),
        "judge_score": row.get("judge_score"),
        "ndcg": row.get("ndcg"),
        "reward": row.get("reward"),
        "format_ok": row.get("format_ok"),
        "num_turns": row.get("num_turns"),
        "terminated": row.get("terminated"),
        "turns": turns,
    }
