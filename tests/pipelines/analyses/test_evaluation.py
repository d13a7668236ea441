"""Scores by a test set's own categories (``ddai eval``), checked against hand-computed values."""

from __future__ import annotations

import pytest

from ddai.pipelines.analyses.evaluation import NONE_LABEL, breakdown, set_categories

# A hand-made test set: categories at the top level and in extra_info, DDAI's "Nan", one missing.
SET = [
    {"id": "p1", "data_source": "slidevqa", "extra_info": {"reason_type": "Single-Hop", "content_type": "Text"}},
    {"id": "p2", "data_source": "slidevqa", "extra_info": {"reason_type": "Multi-Hop", "content_type": "Nan"}},
    {"id": "p3", "data_source": "vidoseek", "extra_info": {"reason_type": "Multi-Hop"}},
]  # fmt: skip


def test_set_categories_reads_every_field_the_set_carries():
    fields, cats = set_categories(SET)
    assert fields == ["data_source", "reason_type", "content_type"]
    assert cats == {
        "p1": {"data_source": "slidevqa", "reason_type": "Single-Hop", "content_type": "Text"},
        "p2": {"data_source": "slidevqa", "reason_type": "Multi-Hop", "content_type": "Nan"},
        "p3": {"data_source": "vidoseek", "reason_type": "Multi-Hop", "content_type": NONE_LABEL},
    }
    assert set_categories(SET, ["reason_type"])[0] == ["reason_type"]
    with pytest.raises(ValueError, match="--by level: the test set has no such field; it carries"):
        set_categories(SET, ["level"])


def test_breakdown_matches_hand_computed_scores():
    _, cats = set_categories(SET)

    def r(uid, answer, judge, ndcg):
        ref = {"p1": "0.3%", "p2": "two", "p3": "Paris"}[uid]
        return {"uid": uid, "answer": answer, "reference_answer": ref, "judge_score": judge,
                "ndcg": ndcg, "categories": cats[uid]}  # fmt: skip

    rows = [
        r("p1", "0.3%", 1.0, 1.0),  # accuracy 1
        r("p1", "0.5%", 0.0, 0.5),  # accuracy 0
        r("p2", "2", 1.0, None),  # accuracy 0: "2" is not "two"; no NDCG counts 0
        r("p3", "paris", None, 0.25),  # accuracy 1 (case ignored), not judged
    ]
    out = breakdown(rows, ["data_source", "reason_type", "content_type"])
    assert out["overall"] == {
        "rollouts": 4, "prompts": 3, "accuracy": 2 / 4, "judge": 2 / 3, "judge_missing": 1,
        "ndcg": (1.0 + 0.5 + 0.0 + 0.25) / 4,
    }  # fmt: skip
    by = out["by_category"]
    assert by["data_source"] == [
        {"value": "slidevqa", "rollouts": 3, "prompts": 2, "accuracy": 1 / 3, "judge": 2 / 3,
         "judge_missing": 0, "ndcg": 1.5 / 3},
        {"value": "vidoseek", "rollouts": 1, "prompts": 1, "accuracy": 1.0, "judge": None,
         "judge_missing": 1, "ndcg": 0.25},
    ]  # fmt: skip
    assert [(s["value"], s["accuracy"], s["judge"], s["ndcg"]) for s in by["reason_type"]] == [
        ("Single-Hop", 0.5, 0.5, 0.75),
        ("Multi-Hop", 0.5, 1.0, 0.125),
    ]
    assert [(s["value"], s["rollouts"]) for s in by["content_type"]] == [
        ("Text", 2), ("Nan", 1), (NONE_LABEL, 1),
    ]  # fmt: skip
