"""The world's funnel rules treat float noise as a tie, exactly as the funnel steps do."""

from __future__ import annotations

from ddai.pipelines.fixtures.runs import at_or_under, bucket, ranked
from ddai.pipelines.funnel.scores import BOUNDARY_DECIMALS


def test_last_bit_differences_are_ties_in_dataset_order():
    # 0.6029332273484707 vs ...708: the same mean summed in another order.
    score = {"a": 0.6029332273484707, "b": 0.6029332273484708, "c": 0.9}
    assert ranked(["a", "b", "c"], score) == ["c", "a", "b"]
    assert ranked(["b", "a", "c"], score) == ["c", "b", "a"]


def test_thresholds_after_rounding():
    mean_02 = sum([0.2] * 3) / 3  # 0.20000000000000004
    assert mean_02 > 0.2
    assert at_or_under(["x"], {"x": mean_02}, 0.2) == ["x"]
    at_07 = sum([0.7] * 6) / 6  # 0.7000000000000001: still "not above 0.7"
    at_01 = sum([0.1] * 6) / 6  # 0.09999999999999999: still "at least 0.1"
    assert at_07 > 0.7 and at_01 < 0.1
    got = bucket(["p", "q", "r"], {"p": at_07, "q": at_01, "r": 0.0999})
    assert got == {"B": [], "A": ["p", "q"], "0": ["r"]}


def test_same_precision_as_the_funnel():
    from ddai.pipelines.fixtures import runs

    assert runs.SCORE_DECIMALS == BOUNDARY_DECIMALS
