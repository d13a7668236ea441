"""The local GT verifier: hand cases, and the synthetic world's planted wrong ground truths."""

from __future__ import annotations

import pytest

from ddai.pipelines.backends import VerifyRequest, get_backend, run_sync
from ddai.pipelines.backends.gt_check import check
from ddai.pipelines.fixtures.world import build_world

SLIDE = "Revenue by region (2019)\nNorth: 1,894 million USD\nSouth: 742 million USD\nEast: 42.5 million USD"


@pytest.mark.parametrize(
    ("question", "reference", "verdict"),
    [
        ("What was the revenue of North in 2019?", "1,894", "ok"),
        ("What was the revenue of North in 2019?", "1894", "ok"),  # number format
        ("What was the revenue of East in 2019?", "42.50", "ok"),
        # South's value given for North: printed on the page, but on another line → contradiction
        ("What was the revenue of North in 2019?", "742", "wrong"),
        ("What was the revenue of North in 2019?", "1,900", "wrong"),
        # no line matches the question and the number is nowhere → cannot tell
        ("How many stores opened?", "12", "uncertain"),
        ("Which region is listed first?", "North", "ok"),  # text found on the page
        # fuzzy: "nort" vs the page's "north" is 1 edit in 5 characters, ANLS 0.8 ≥ 0.8
        ("Which region is listed first?", "Nort", "ok"),
        # "nroth" is 2 edits away, ANLS 0.6: not a match
        ("Which region is listed first?", "Nroth", "uncertain"),
        ("Which region is listed first?", "West", "uncertain"),
    ],
)
def test_hand_cases(question, reference, verdict):
    got, reason = check(question, reference, SLIDE)
    assert got == verdict, reason


def test_difference_questions_are_checked_by_arithmetic():
    pages = (
        "Sales by store (2018)\nMain: 12.5\nPark: 3.0\nSales by store (2020)\nMain: 15.0\nPark: 2.0"
    )
    q = "By how much did the sales of Main change from 2018 to 2020?"
    assert check(q, "2.5", pages)[0] == "ok"  # 15.0 − 12.5
    assert check(q, "-2.5", pages)[0] == "ok"
    assert check(q, "1.0", pages)[0] == "wrong"  # Park's change, not Main's


def test_empty_inputs_are_uncertain():
    assert check("q", "1", "")[0] == "uncertain"
    assert check("q", "", "text")[0] == "uncertain"


@pytest.mark.parametrize("size", ["small", "medium"])
def test_flags_the_planted_wrong_ground_truths_and_few_others(size):
    world = build_world(seed=0, size=size)
    reqs = [
        VerifyRequest(
            p.question, p.answer, "\n".join(world.corpus.text(pid) for pid in p.reference_pages)
        )
        for p in world.prompts
    ]
    results = run_sync(get_backend("verifier", "local", config={}).verify(reqs))
    flagged = [r.verdict != "ok" for r in results]
    planted = [p.wrong_gt for p in world.prompts]
    tp = sum(f and w for f, w in zip(flagged, planted, strict=True))
    precision = tp / max(sum(flagged), 1)
    recall = tp / max(sum(planted), 1)
    print(
        f"\nlocal GT verifier on the {size} world: {sum(planted)} planted, {sum(flagged)} flagged, "
        f"precision {precision:.3f}, recall {recall:.3f}"
    )
    assert sum(planted) >= 4
    assert recall == 1.0
    assert precision >= 0.9
