"""The verl prompt-row reader on rows where the funnel and the trainer used to disagree."""

from __future__ import annotations

import json

import pytest

from ddai.pipelines.records import prompt_row as pr

SYSTEM = {"role": "system", "content": "You are a search agent."}


def test_question_falls_back_to_the_user_turn_without_its_prefix():
    row = {"prompt": [SYSTEM, {"role": "user", "content": "Question: How many?"}]}
    assert pr.question_of(row) == "How many?"
    # extra_info wins; only a leading prefix is stripped
    assert pr.question_of({**row, "extra_info": {"question": "Q"}}) == "Q"
    mid = {"prompt": [{"role": "user", "content": "Why the Question: here?"}]}
    assert pr.question_of(mid) == "Why the Question: here?"
    assert pr.question_of({"question": "top"}) == "top"
    assert pr.question_of({}) == ""


def test_prompt_and_extra_info_as_json_text():
    row = {
        "prompt": json.dumps([SYSTEM, {"role": "user", "content": "Question: Where?"}]),
        "extra_info": json.dumps({"answer": "there", "file_name": "4.pdf", "reference_page": 2}),
        "reward_model": json.dumps({"ground_truth": "", "style": "rule"}),
    }
    assert pr.question_of(row) == "Where?"
    assert pr.reference_of(row) == "there"  # an empty ground truth falls through
    assert pr.reference_page_ids(row) == ["4_2"]


@pytest.mark.parametrize(
    ("pages", "want"),
    [
        ([3, 5], ["12_3", "12_5"]),
        (7, ["12_7"]),  # one page, not a list
        ("7", ["12_7"]),  # one page as text (not the pages "1" and "2" of "12")
        ([7.0], ["12_7"]),  # a float column
        (["07"], ["12_7"]),
        (["a1"], ["12_a1"]),  # not a number: as given
        ([], []),
        (None, []),
    ],
)
def test_reference_pages(pages, want):
    assert pr.reference_page_ids({"file_name": "dir/12.pdf", "reference_page": pages}) == want


def test_reference_answer_order_and_json():
    row = {"reward_model": {"ground_truth": ["a", "b"]}, "extra_info": {"answer": "x"}}
    assert pr.reference_of(row) == '["a", "b"]'
    assert pr.reference_of({"answer": "top"}) == "top"
    assert pr.reference_of({}) == ""


def test_ids_and_documents():
    assert pr.uid_of({"id": "train_3"}) == "train_3"
    assert pr.uid_of({"uid": 9}) == "9"
    assert pr.uid_of({}, 4) == "row_4"
    assert pr.doc_id_of({"extra_info": {"file_name": "a/b/9.pdf"}}) == "9"
    assert pr.doc_id_of({}) is None
