"""NDCG (DDAI's, never-truncated ideal), ANLS and answer normalization, by hand."""

from __future__ import annotations

import math

import pytest
from support.golden_rank import first_golden_rank

from ddai.pipelines.records.metrics import (
    anls,
    exact_match,
    ndcg,
    normalize_answer,
    token_f1,
)


def test_ndcg_hand_computed():
    # one of two golden pages at rank 1: DCG = 1; ideal = 1 + 1/log2(3) = 1.6309 (not truncated to R=1)
    assert ndcg(["a"], ["a", "b"]) == pytest.approx(1 / (1 + 1 / math.log2(3)), abs=1e-12)
    assert ndcg(["a"], ["a", "b"]) == pytest.approx(0.6131471927654584, abs=1e-12)
    # golden at rank 2 of 2, one golden: DCG = 1/log2(3); ideal = 1
    assert ndcg(["x", "a"], ["a"]) == pytest.approx(1 / math.log2(3), abs=1e-12)
    # duplicates collapse to first-seen order: [x, a] again
    assert ndcg(["x", "x", "a", "x"], ["a"]) == pytest.approx(1 / math.log2(3), abs=1e-12)
    # both golden found at ranks 1 and 3 of 3: (1 + 1/2) / (1 + 1/log2 3)
    assert ndcg(["a", "z", "b"], ["a", "b"]) == pytest.approx(
        1.5 / (1 + 1 / math.log2(3)), abs=1e-12
    )
    assert ndcg(["a", "b"], ["a", "b"]) == pytest.approx(1.0)
    assert ndcg([], ["a"]) == 0.0
    assert ndcg(["a"], []) == 0.0
    assert ndcg(["x", "y"], ["a"]) == 0.0


def test_first_golden_rank():
    assert first_golden_rank(["x", "x", "a"], ["a"]) == 2
    assert first_golden_rank(["x"], ["a"]) is None


def test_normalization_and_exact_match():
    assert normalize_answer("The  Apple.") == "apple"
    assert normalize_answer("1,000") == "1000"
    assert normalize_answer("3.50%") == "3.5%"
    assert exact_match("$1,000", ["1000"]) == 1.0  # "$" is punctuation and is stripped
    assert exact_match("1,000.", ["1000"]) == 1.0
    assert exact_match("an Answer!", ["answer"]) == 1.0
    assert exact_match("other", ["answer"]) == 0.0


def test_token_f1():
    # pred {new, york, city} vs gold {new, york}: p=2/3, r=1, F1=0.8
    assert token_f1("New York City", ["new york"]) == pytest.approx(0.8)
    assert token_f1("", [""]) == 1.0
    assert token_f1("x", ["y"]) == 0.0


def test_anls_definition():
    assert anls("hello", ["hello"]) == 1.0
    # lev("hellp", "hello") = 1, max len 5: NL = 0.2 -> 0.8
    assert anls("hellp", ["hello"]) == pytest.approx(0.8)
    # NL = 3/5 = 0.6 >= tau 0.5 -> 0
    assert anls("hexyz", ["hello"]) == 0.0
    assert anls("HeLLo ", ["other", "hello"]) == 1.0
    assert anls("abc", ["abd"], tau=0.3) == 0.0  # NL 1/3 >= 0.3
