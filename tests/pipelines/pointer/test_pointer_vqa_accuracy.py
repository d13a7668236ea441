"""VQAv2 accuracy (official definition) and ANLS, by hand and against a reference loop."""

from __future__ import annotations

import random

import pytest

from ddai.pipelines.pointer.vqa import scorer
from ddai.pipelines.records.metrics import (
    anls,
    vqa_accuracy,
    vqa_accuracy_symmetric,
    vqa_normalize,
    vqa_process_digit_article,
    vqa_process_punctuation,
)


@pytest.mark.parametrize(
    ("matches", "expected"),
    # 10 answers, m of them match. Leaving out a matching one leaves m-1 matches, any other m:
    # acc = (m·min(1,(m-1)/3) + (10-m)·min(1,m/3)) / 10
    # m=1: (0 + 9/3)/10 = 0.3; m=2: (2/3 + 16/3)/10 = 0.6; m=3: (6/3 + 7)/10 = 0.9; m=4: 1.0
    [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0), (7, 1.0), (10, 1.0)],
)
def test_vqa_accuracy_by_number_of_matching_annotators(matches, expected):
    answers = ["cat"] * matches + ["dog"] * (10 - matches)
    assert vqa_accuracy("cat", answers) == pytest.approx(expected, abs=1e-12)


def test_vqa_accuracy_leave_one_out_with_three_answers():
    # 3 answers, 1 match: leaving it out -> 0/3; leaving out either other -> 1/3; mean = 2/9
    assert vqa_accuracy("red", ["red", "blue", "green"]) == pytest.approx(2 / 9, abs=1e-12)
    assert vqa_accuracy("red", []) == 0.0


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("Yes!", "yes"),  # "!" then lowercase
        ("t-shirt", "t shirt"),  # a mark between letters becomes a space
        ("yes, sir", "yes sir"),  # a mark next to a space is deleted
        ("1,000", "1000"),  # digit-comma-digit: every mark is deleted
        ("3.5", "3.5"),  # a period before a digit stays
        ("dog.", "dog"),  # any other period goes
        ("Two", "2"),  # number words, after lowercasing
        ("none", "0"),
        ("a Dog", "dog"),  # articles dropped
        ("the an apple", "apple"),
        ("dont", "don't"),  # contractions restored
        ("isnt it", "isn't it"),
        ("  two\tdogs\n", "2 dogs"),  # tabs and newlines are spaces; words rejoined by one space
        ("what's up?", "what's up"),  # an apostrophe is not in the official mark list
    ],
)
def test_vqa_normalization_edge_cases(raw, normalized):
    assert vqa_normalize(raw) == normalized


def test_vqa_normalization_steps_are_the_official_ones():
    # punctuation keeps case and leaves number words alone; the word step lowercases first
    assert vqa_process_punctuation("Two-Dogs!") == "Two Dogs "
    assert vqa_process_digit_article("Two Dogs ") == "2 dogs"


def test_vqa_accuracy_is_the_official_script_by_default():
    # the case: "two" is not processed on the answer side, so only the 2 × "2" match:
    # 10 answers with 2 matches -> (2·1/3 + 8·2/3)/10 = 0.6
    assert vqa_accuracy("2", ["two"] * 2 + ["2"] * 2 + ["three"] * 6) == pytest.approx(0.6)
    # the prediction is processed: "Two." -> "2", matching 10 × "2"
    assert vqa_accuracy("Two.", ["2"] * 10) == 1.0
    # identical answers are compared untouched: "one way" never equals the prediction "1 way"
    assert vqa_accuracy("one way", ["one way"] * 10) == 0.0
    # differing answers get the punctuation step only, so a hyphen becomes a space: 4 matches
    assert vqa_accuracy("t shirt", ["t-shirt"] * 4 + ["shirt"] * 6) == 1.0
    # ... but not the article step: "a dog" stays, the prediction "the dog" -> "dog"; 3 "dog"
    assert vqa_accuracy("the dog", ["a dog"] * 7 + ["dog"] * 3) == pytest.approx(0.9)
    # a capital is no punctuation: "Yes" never equals the lowercased prediction
    assert vqa_accuracy("yes", ["Yes"] * 9 + ["no"]) == 0.0


def test_symmetric_normalization_is_a_named_option():
    answers = ["two"] * 2 + ["2"] * 2 + ["three"] * 6
    # all four "two"/"2" answers normalize to "2": 4 matches -> 1.0
    assert vqa_accuracy("2", answers, normalize_answers=True) == 1.0
    assert vqa_accuracy_symmetric("2", answers) == 1.0
    assert vqa_accuracy("2", ["two"] * 4 + ["3"] * 6, normalize_answers=True) == 1.0
    assert vqa_accuracy("one way", ["one way"] * 10, normalize_answers=True) == 1.0
    # "A T-shirt" -> "t shirt"; 3 answers match -> 0.9
    answers = ["t shirt"] * 3 + ["shirt"] * 7
    assert vqa_accuracy("A T-shirt", answers, normalize_answers=True) == pytest.approx(0.9)


def test_pointer_scorers_name_both_variants():
    assert scorer("vqa")("2", ["two"] * 2 + ["2"] * 2 + ["three"] * 6) == pytest.approx(0.6)
    assert scorer("vqa-sym")("2", ["two"] * 2 + ["2"] * 2 + ["three"] * 6) == 1.0


def _official_loop(pred: str, answers: list[str]) -> float:
    """The evaluation loop of the official script, transcribed: answers are dicts with ids, and
    each is left out by identity in turn."""
    gts = [{"answer_id": i, "answer": a} for i, a in enumerate(answers)]
    res = vqa_normalize(pred)
    if len({a["answer"] for a in gts}) > 1:
        for a in gts:
            a["answer"] = vqa_process_punctuation(a["answer"])
    accs = []
    for gt in gts:
        others = [item for item in gts if item != gt]
        accs.append(min(1, len([item for item in others if item["answer"] == res]) / 3))
    return sum(accs) / len(accs)


def test_vqa_accuracy_equals_the_official_loop_on_random_cases():
    rng = random.Random(0)
    vocab = [
        "2",
        "two",
        "Two",
        " yes",
        "a dog\n",
        "yes",
        "no",
        "t-shirt",
        "t shirt",
        "red",
        "a dog",
        "dog",
        "1,000",
        "1000",
    ]
    for _ in range(300):
        answers = [rng.choice(vocab) for _ in range(10)]
        pred = rng.choice([*vocab, "Yes!", "Two.", "The dog"])
        assert vqa_accuracy(pred, answers) == pytest.approx(
            _official_loop(pred, answers), abs=1e-12
        )


def test_anls_definition():
    # NL = lev / max(len): "helo" vs "hello" = 1/5 = 0.2 < 0.5 -> 0.8
    assert anls("helo", ["hello"]) == pytest.approx(0.8)
    # case and surrounding/inner whitespace do not count
    assert anls("  Hello   World ", ["hello world"]) == 1.0
    # NL exactly 0.5 is not below tau: "ab" vs "ax" = 1/2 -> 0
    assert anls("ab", ["ax"]) == 0.0
    assert anls("ab", ["ax"], tau=0.6) == pytest.approx(0.5)
    # the best answer counts: "kitten" vs "sitting" = 3/7 -> 4/7; vs "kitten" -> 1
    assert anls("kitten", ["sitting"]) == pytest.approx(4 / 7)
    assert anls("kitten", ["sitting", "kitten"]) == 1.0
    assert anls("abc", ["xyz"]) == 0.0
