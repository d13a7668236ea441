"""Generation records: de-duplication priority, the raw and flattened formats, statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.pointer_seed002 import SEED_RECORD

from ddai.pipelines.pointer.records import (
    PointerCandidate,
    dedupe_candidates,
    flatten,
    query_record,
)
from ddai.pipelines.pointer.stats import gen_method_stats, index_stats, total_variation
from ddai.pipelines.pointer.world import jsonl, read_jsonl


def c(a, b, method, **kw):
    return PointerCandidate(pointer=[a, b], gen_method=method, **kw)


def test_dedupe_keeps_one_per_unordered_pair_with_beam_over_sample_over_random():
    cands = [
        c(1, 2, "sample", temperature=1.3),
        c(3, 4, "random"),
        c(2, 1, "beam", beam_rank=0),  # replaces the sample in its slot
        c(4, 3, "sample", temperature=0.7),  # replaces the random pair
        c(5, 6, "sample", temperature=0.7),
        c(6, 5, "sample", temperature=1.0),  # same priority: the first stays
        c(1, 2, "random"),  # lower priority: dropped
    ]
    out = dedupe_candidates(cands)
    assert [(x.pointer, x.gen_method) for x in out] == [
        ([2, 1], "beam"),
        ([4, 3], "sample"),
        ([5, 6], "sample"),
    ]
    assert out[2].temperature == 0.7


def test_candidates_are_validated():
    with pytest.raises(ValueError, match="distinct"):
        c(3, 3, "beam")
    with pytest.raises(ValueError, match="gen_method"):
        c(1, 2, "greedy")


def test_raw_record_has_the_seed_shape_and_round_trips(tmp_path):
    query = {
        "query_id": "q7",
        "image_id": "img",
        "question": "How many?",
        "split": "train",
        "topic": "x",
    }
    cands = [
        c(
            0,
            1,
            "beam",
            beam_rank=0,
            beam_score=-1.5,
            logprob_score=-1.5,
            vqa_pred_answer="2",
            vqa_correct=1,
            vqa_acc_score=1.0,
        ),
        c(
            2,
            3,
            "random",
            logprob_score=-6.0,
            gen_logprob=-math.log(12),
            eval_failed=True,
            eval_error="timeout",
        ),
    ]
    rec = query_record(query, ["d1", "d2", "d3", "d4"], cands)
    assert list(rec) == ["query_id", "meta", "candidate_pool", "pointer_candidates"]
    assert rec["meta"] == {"image_id": "img", "question": "How many?", "split": "train"}
    assert rec["candidate_pool"] == {"candidate_ids": ["d1", "d2", "d3", "d4"], "size": 4}
    assert list(rec["pointer_candidates"][0])[:9] == [
        "pointer", "gen_method", "beam_rank", "beam_score", "logprob_score", "temperature",
        "vqa_pred_answer", "vqa_correct", "vqa_acc_score",
    ]  # fmt: skip
    path = tmp_path / "raw.jsonl"
    path.write_text(jsonl([rec, rec]), encoding="utf-8")
    assert read_jsonl(path) == [rec, rec]

    flat = flatten(read_jsonl(path))
    assert flat.height == 4
    row = flat.row(1, named=True)
    assert row["query_id"] == "q7" and row["pointer"] == [2, 3] and row["eval_failed"]
    assert row["vqa_correct"] is None and row["eval_error"] == "timeout" and row["split"] == "train"


def test_index_stats_and_total_variation_by_hand():
    ptrs = np.array([[0, 1], [0, 2], [3, 1]])  # picks: 0,1,0,2,3,1 over K=4
    s = index_stats(ptrs, 4)
    # histogram [2, 2, 1, 1] / 6 -> mean index (0·2 + 1·2 + 2 + 3) / 6 = 7/6; top-2 share 4/6
    assert s["mean_index"] == pytest.approx(7 / 6)
    assert s["top2_share"] == pytest.approx(4 / 6)
    # entropy -(2·(1/3)ln(1/3) + 2·(1/6)ln(1/6)) / ln 4
    h = -(2 / 3 * math.log(1 / 3) + 1 / 3 * math.log(1 / 6)) / math.log(4)
    assert s["index_entropy"] == pytest.approx(h)
    assert total_variation(np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5])) == pytest.approx(
        0.5
    )


def test_gen_method_stats_by_hand():
    rec = query_record(
        {"query_id": "q", "split": "train"},
        [f"d{i}" for i in range(4)],
        [
            c(0, 1, "beam", logprob_score=-1.0, vqa_correct=1, vqa_acc_score=1.0),
            c(0, 2, "beam", logprob_score=-2.0, vqa_correct=0, vqa_acc_score=0.3),
            c(2, 3, "random", logprob_score=-5.0, vqa_correct=1, vqa_acc_score=1.0),
            c(1, 3, "random", eval_failed=True, eval_error="boom"),
        ],
    )
    table = {r["gen_method"]: r for r in gen_method_stats(flatten([rec]), 4).iter_rows(named=True)}
    assert table["beam"]["n"] == 2 and table["beam"]["mean_correct"] == pytest.approx(0.5)
    assert table["beam"]["mean_acc_score"] == pytest.approx(0.65)
    assert table["beam"]["top2_share"] == pytest.approx(3 / 4)  # picks 0,1,0,2
    # the failed evaluation is counted and left out of the means
    assert table["random"]["eval_failed"] == 1 and table["random"]["mean_correct"] == 1.0


def test_a_record_in_the_seeds_own_schema_is_read_as_evaluated():
    """eval_failed / eval_error are ddai's additions: a record without them (seed 002 §2.1) was
    evaluated wherever it has the mandatory vqa_correct; one without vqa_correct is a failed
    evaluation with that reason, not a row that silently vanishes from every count."""
    flat = flatten([SEED_RECORD])
    assert flat["eval_failed"].to_list() == [False, False, False]
    assert flat["eval_error"].to_list() == [None, None, None]
    assert flat["vqa_correct"].to_list() == [1, 1, 0]
    table = {r["gen_method"]: r for r in gen_method_stats(flat, 32).iter_rows(named=True)}
    assert table["beam"]["eval_failed"] == 0 and table["beam"]["mean_correct"] == 1.0
    assert table["random"]["mean_correct"] == 0.0

    no_correct = {**SEED_RECORD["pointer_candidates"][2], "vqa_correct": None}
    flat = flatten([{**SEED_RECORD, "pointer_candidates": [no_correct]}])
    assert flat["eval_failed"].to_list() == [True]
    assert flat["eval_error"].to_list() == ["no vqa_correct"]
    # ddai's own fields win where present: a recorded failure keeps its reason
    failed = {**no_correct, "eval_failed": True, "eval_error": "timeout"}
    flat = flatten([{**SEED_RECORD, "pointer_candidates": [failed]}])
    assert flat["eval_error"].to_list() == ["timeout"]
