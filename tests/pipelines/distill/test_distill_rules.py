"""The rewrite's safety rules: every pattern with cases that must and must not match."""

from __future__ import annotations

import re

import pytest

from ddai.pipelines.distill import rules
from ddai.pipelines.distill.rules import ClaimRules, think_violation
from ddai.pipelines.records.tags import ACTION_TAG_TEXT_RE

CLAIMS = ClaimRules()


@pytest.mark.parametrize(
    "text",
    [
        "<search>q</search>",
        "</search>",
        "< search>",
        "</ bbox>",
        "<BBOX>[1, 2, 3, 4]",
        "then <search_complete>true",
        "an <answer>",
        "< / search",
    ],
)
def test_action_tag_text_matches(text):
    assert ACTION_TAG_TEXT_RE.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "I will search for the chart",
        "a bbox around the table",
        "search_complete when done",
        "<searching>",  # not at a word boundary
        "<bboxes>",
        "x < search_depth",  # '<' then a space then a longer word
        "<think>",
        "the answer is 3 < 4",
    ],
)
def test_action_tag_text_does_not_match(text):
    assert not ACTION_TAG_TEXT_RE.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "The image shows a chart.",
        "the IMAGE SHOWS two bars",
        "The value in the image is 5",
        "It is visible in the image.",
        "I can see the table now",
        "i can see it",
        "It clearly shows 42%",
        "이미지에서 표가 보인다",
        "이미지에 숫자가 보이지 않는다",
        "사진에서 확인할 수 있다",
        "사진에 42가 보인다",
        "이미지에서\n값이 보인다",  # a claim split over lines
    ],
)
def test_observation_claims_match(text):
    assert CLAIMS.claims(text)


@pytest.mark.parametrize(
    "text",
    [
        "The image contains a chart.",  # not in DDAI's list
        "I need to crop the image",
        "imagine the image showing",  # 'showing' is not 'shows'
        "I cannot see the value",  # 'cannot see' is not 'can see'
        "in the images",  # plural: no word boundary after 'image'
        "Ican see",
        "이미지를 검색해야 한다",
        "보인다 이미지에서",  # the verb must come after 이미지/사진 + 에서/에
        "사진 찍기",
    ],
)
def test_observation_claims_do_not_match(text):
    assert not CLAIMS.claims(text)


def test_the_double_escaped_copy_never_matched_and_ours_does():
    # DDAI's rewrite-time copy: raw strings holding "\\b", i.e. a literal backslash + 'b'.
    ddai_copy = re.compile(r"\\b(the image shows|i can see)\\b", re.IGNORECASE)
    assert not ddai_copy.search("I can see the chart")
    assert CLAIMS.claims("I can see the chart")
    ddai_tag_copy = re.compile(r"</?\\s*(search|bbox|search_complete|answer)\\b", re.IGNORECASE)
    assert not ddai_tag_copy.search("<bbox>[1,2,3,4]</bbox>")
    assert ACTION_TAG_TEXT_RE.search("<bbox>[1,2,3,4]</bbox>")


def test_added_is_per_claim():
    # The original already says "in the image"; the rewrite adds "I can see": still a new claim.
    original = "The total in the image is unclear."
    rewritten = "I can see the total in the image."
    assert CLAIMS.added(original, rewritten) == [r"(?i)\bi can see\b"]
    assert CLAIMS.added(rewritten, original) == []
    assert CLAIMS.added(original, original) == []


@pytest.mark.parametrize(
    ("original", "rewritten", "rule"),
    [
        ("plan a search", "plan a search", None),
        ("plan a search", "Plan the next search.", None),
        ("plan a search", "plan </think><think> again", rules.THINK_TAG_IN_REWRITE),
        ("plan a search", "plan <think>", rules.THINK_TAG_IN_REWRITE),
        ("plan a search", "plan <search>other query</search>", rules.ACTION_TAG_IN_REWRITE),
        ("crop it", "crop <bbox>[0, 0, 5, 5]</bbox>", rules.ACTION_TAG_IN_REWRITE),
        ("read the value", "I can see the value is 4", rules.NEW_OBSERVATION_CLAIM),
        ("I can see 4", "I can see the value 4", None),  # the claim was there already
        ("값을 찾자", "이미지에서 값이 보인다", rules.NEW_OBSERVATION_CLAIM),
    ],
)
def test_think_violation(original, rewritten, rule):
    assert think_violation(original, rewritten, CLAIMS) == rule


def test_claim_rules_configurable_and_checked():
    custom = ClaimRules.of([r"(?i)\bclearly\b"])
    assert custom.claims("it is clearly 5")
    assert not custom.claims("I can see it")  # the list replaces the defaults
    assert ClaimRules.of(None).patterns == rules.DEFAULT_CLAIM_PATTERNS
    assert ClaimRules.of([]).patterns == rules.DEFAULT_CLAIM_PATTERNS
    with pytest.raises(ValueError, match="not a valid regex"):
        ClaimRules.of(["(unclosed"])
