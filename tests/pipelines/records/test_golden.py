"""Golden-page coverage of a corpus, counted by hand."""

from __future__ import annotations

from ddai.pipelines.records.golden import coverage


def test_coverage_counts_prompts_and_distinct_pages():
    corpus = {"1_1", "1_2", "3_1"}
    cov = coverage(
        [("a", ["1_1"]), ("b", ["1_2", "2_5"]), ("c", []), ("d", ["2_5", "4_4"]), ("e", ["3_1"])],
        corpus.__contains__,
    )
    assert cov.prompts == 4 and cov.prompts_without_golden == 1
    assert cov.prompts_missing == ["b", "d"]
    assert cov.pages == 5 and cov.missing_pages == ["2_5", "4_4"]
    assert not cov.ok
    msg = cov.describe("pages.parquet")
    assert "2 of 4 prompts" in msg and "2 of 5 distinct" in msg and "2_5, 4_4" in msg
    assert cov.to_dict()["missing_examples"] == ["2_5", "4_4"]


def test_full_coverage_is_ok_and_says_nothing():
    cov = coverage([("a", ["1_1", "1_1"])], {"1_1"}.__contains__)
    assert cov.ok and cov.describe("x") == "" and cov.pages == 1 and cov.prompts_missing == []
