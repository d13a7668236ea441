"""``curate`` and ``train grpo`` read a verl prompt row identically: the funnel's field readers
and the trainer's ``Task`` agree on rows where they used to differ."""

from __future__ import annotations

import json

import pytest

from ddai.pipelines.funnel import dataset as ds
from ddai.trainer.episode.tasks import task_from_row

USER = {"role": "user", "content": "Question: Which deck?"}
TRICKY = [
    # no extra_info.question: the user turn, prefix stripped (the trainer used to keep it)
    {"id": "a", "file_name": "3.pdf", "reference_page": [1], "prompt": [USER]},
    # one page as a number (the trainer used to fail on it)
    {"id": "b", "file_name": "3.pdf", "reference_page": 4, "prompt": [USER]},
    # one page as text (the trainer used to read "12" as pages 1 and 2)
    {"id": "c", "file_name": "3.pdf", "reference_page": "12", "prompt": [USER]},
    # everything in extra_info, as JSON text
    {
        "id": "d",
        "prompt": json.dumps([USER]),
        "extra_info": json.dumps({"file_name": "8.pdf", "reference_page": [2], "answer": "x"}),
    },
    # an empty ground truth falls through to extra_info.answer; a list answer is JSON text
    {
        "id": "e",
        "prompt": [USER],
        "reward_model": {"ground_truth": ""},
        "extra_info": {"answer": "y"},
    },
    {"id": "f", "prompt": [USER], "reward_model": {"ground_truth": ["p", "q"]}},
]


@pytest.mark.parametrize("row", TRICKY, ids=[r["id"] for r in TRICKY])
def test_funnel_and_trainer_read_a_row_alike(row):
    task = task_from_row(row)
    assert task.question == ds.question_of(row)
    assert list(task.reference_pages) == ds.reference_page_ids(row)
    assert (task.reference_answer or "") == ds.reference_of(row)


def test_the_settled_values():
    tasks = {r["id"]: task_from_row(r) for r in TRICKY}
    assert tasks["a"].question == "Which deck?"
    assert tasks["b"].reference_pages == ("3_4",)
    assert tasks["c"].reference_pages == ("3_12",)
    assert tasks["d"].reference_pages == ("8_2",) and tasks["d"].doc_id == "8"
    assert tasks["d"].reference_answer == "x"
    assert tasks["e"].reference_answer == "y"
    assert tasks["f"].reference_answer == '["p", "q"]'
