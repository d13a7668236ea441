"""The browser's view of a rollout: bounded texts and pages marked golden, same document, other."""

from __future__ import annotations

from ddai.reports.transcript import clip, mark_pages, transcript


def test_clip():
    assert clip(None, 3) is None
    assert clip("abc", 3) == "abc"
    assert clip("abcdef", 2) == "ab… [4 more characters]"
    assert clip("x" * 1_234_567, 0) == "… [1,234,567 more characters]"


def test_mark_pages():
    got = mark_pages(["7_1", "2_2", "2_9", "20_1"], ["2_1", "2_2"])
    assert [(p["page"], p["mark"]) for p in got] == [
        ("7_1", "other"),
        ("2_2", "golden"),
        ("2_9", "same_doc"),  # document 2 holds the golden pages
        ("20_1", "other"),  # document 20, not 2
    ]
    assert mark_pages(None, ["1_1"]) == [] and mark_pages(["1_1"], None)[0]["mark"] == "other"


def test_transcript_keeps_text_as_written_and_cuts_it():
    think = "<script>alert(1)</script>"
    row = {
        "run_id": "r",
        "step": None,
        "uid": "u",
        "rollout_idx": 0,
        "outcome": "success",
        "tags": ["zero_search"],
        "question": "q",
        "reference_pages": ["1_2"],
        "retrieved_pages": ["1_2"],
        "answer": "a" * 10,
        "turns": [
            {
                "idx": 0,
                "think": think,
                "action": "search",
                "arg": "q",
                "forced": None,
                "retrieved": ["1_3"],
                "observation": None,
                "error": None,
                "value": 0.5,
            },
        ],
    }
    t = transcript(row, text_max=100)
    assert t["turns"][0]["think"] == think  # escaping is the template's job, not this one's
    assert t["turns"][0]["retrieved"] == [{"page": "1_3", "mark": "same_doc"}]
    assert t["turns"][0]["forced"] is False and t["turns"][0]["value"] == 0.5
    assert t["retrieved"] == [{"page": "1_2", "mark": "golden"}]
    assert transcript(row, text_max=4)["answer"] == "aaaa… [6 more characters]"
    assert transcript({**row, "turns": None}, text_max=4)["turns"] == []
