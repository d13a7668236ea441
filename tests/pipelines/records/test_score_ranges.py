"""The bounded scores (DESIGN.md's rollout log: ``judge_score`` and ``ndcg`` lie in 0..1): a finite
value outside the range is refused by ``normalize_rollout`` (ingest quarantines the row), a value
on the bounds is kept, NaN/inf stays the ``nonfinite_score`` flag, ``reward`` is unbounded."""

from __future__ import annotations

import json
import math

import pytest

from ddai.pipelines.records.schema import (
    NONFINITE,
    OUT_OF_RANGE,
    SCORE_RANGES,
    RowError,
    normalize_rollout,
)


def _rec(**kw) -> dict:
    return {"run_id": "r", "uid": "u", "rollout_idx": 0, **kw}


def test_the_ranges_are_the_designs():
    assert SCORE_RANGES == {"judge_score": (0.0, 1.0), "ndcg": (0.0, 1.0)}


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("ndcg", 7.5, "ndcg = 7.5 is outside 0..1"),
        ("ndcg", -0.25, "ndcg = -0.25 is outside 0..1"),
        ("judge_score", 1.0000001, "judge_score = 1.0000001 is outside 0..1"),
        ("judge_score", 10, "judge_score = 10.0 is outside 0..1"),  # a 0..10 judge scale
        ("judge_score", "2", "judge_score = 2.0 is outside 0..1"),  # converted, then refused
    ],
)
def test_a_score_outside_its_range_is_refused_naming_field_and_value(field, value, shown):
    with pytest.raises(RowError) as e:
        normalize_rollout(_rec(**{field: value}))
    assert (e.value.reason, e.value.detail) == (OUT_OF_RANGE, shown)


def test_both_scores_out_of_range_are_both_named():
    with pytest.raises(RowError) as e:
        normalize_rollout(_rec(judge_score=3.0, ndcg=-1.0))
    assert e.value.detail == "judge_score = 3.0 is outside 0..1; ndcg = -1.0 is outside 0..1"


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, 0.613, None])
def test_values_in_range_and_on_the_bounds_are_kept(value):
    row = normalize_rollout(_rec(judge_score=value, ndcg=value))
    assert (row["judge_score"], row["ndcg"]) == (
        (None, None) if value is None else (float(value), float(value))
    )
    assert row["flags"] is None


def test_nonfinite_stays_a_flag_and_reward_is_unbounded():
    row = normalize_rollout(_rec(ndcg=math.inf, judge_score=math.nan, reward=7.5, advantage=-9.0))
    assert (row["ndcg"], row["judge_score"], row["reward"]) == (None, None, 7.5)
    assert row["flags"] == [NONFINITE]
    assert json.loads(row["extra"])["nonfinite"] == {"judge_score": "nan", "ndcg": "inf"}
