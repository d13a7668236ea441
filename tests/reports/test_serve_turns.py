"""A transcript's turns as the rollout page shows them: raw text, boxes, values, missing turns."""

from __future__ import annotations

from ddai.pipelines.records import tags
from ddai.reports.serve.turns import (
    bbox_of,
    missing_turns,
    raw_texts,
    source_formats,
    turn_views,
)

RESPONSE = (
    "<think>look</think>\n<search>q a</search>"
    "<think>zoom</think>\n<bbox>[1, 2, 30, 40]</bbox>"
    "<think>oops</think> stray <search>q</search>"
    "<think>done</think>\n<search_complete>true</search_complete>"
)


def _row(**kw) -> dict:
    turns = [t.to_record() for t in tags.parse_turns(RESPONSE)]
    turns[0]["retrieved"] = ["4_2"]
    turns[0]["value"] = 0.25
    return {"run_id": "r", "uid": "u", "response": RESPONSE, "turns": turns, **kw}


def test_raw_text_of_each_turn_is_what_the_model_wrote():
    views, why = turn_views(_row(reference_pages=["4_2"]))
    assert why is None
    assert [v["raw"] for v in views] == [
        "<think>look</think>\n<search>q a</search>",
        "<think>zoom</think>\n<bbox>[1, 2, 30, 40]</bbox>",
        "<think>oops</think> stray <search>q</search>",
        "<think>done</think>\n<search_complete>true</search_complete>",
    ]
    assert "".join(v["raw"] for v in views) == RESPONSE
    # the invalid turn keeps its reason; its raw text is what the page shows instead of think —
    assert views[2]["action"] == "invalid" and views[2]["error"] == "text between think and action"
    # the bbox crops the page last shown, its box in page pixels; values pass through
    assert views[1]["crop_of"] == "4_2" and views[1]["bbox"] == [1.0, 2.0, 30.0, 40.0]
    assert views[0]["bbox"] is None and views[0]["value"] == 0.25
    assert views[0]["pages"] == [{"page": "4_2", "mark": "golden"}]
    assert views[1]["crop_mark"] == "golden" and views[0]["crop_mark"] is None


def test_raw_text_is_withheld_with_a_reason_when_the_response_disagrees():
    assert raw_texts(None, 2) == (
        [None, None],
        "the log keeps no response text, so no turn's raw text is shown",
    )
    raws, why = raw_texts("<think>a</think><search>q</search>", 3)
    assert raws == [None] * 3 and "parses into 1 turn(s) but the log stores 3" in why
    assert raw_texts("", 0) == ([], None)


def test_bbox_of_accepts_only_a_box():
    assert bbox_of("[1, 2.5, 3, 4]") == [1.0, 2.5, 3.0, 4.0]
    for bad in (None, "", "[1,2,3]", "[3, 2, 1, 4]", '["a", 1, 2, 3]', "[1, 2, 1e999, 4]", "x"):
        assert bbox_of(bad) is None, bad


def test_missing_turns_says_why():
    flash = {"sources": [{"path": "round0_flash_rm_detail.jsonl", "format": "ddai-flash"}]}
    assert source_formats(flash) == ["ddai-flash"]
    assert source_formats({"history": [flash], "sources": []}) == ["ddai-flash"]
    assert source_formats(None) == []
    row = {"run_id": "round0", "turns": [], "response": None}
    said = missing_turns(row, ["ddai-flash"])
    assert said == (
        "No turns: run round0 was ingested from a DDAI flash log (flash_rm_detail.jsonl), which "
        "keeps the question, the final answer, the pages retrieved and the scores of each "
        "rollout, not its turns."
    )
    assert "response text (below)" in missing_turns({**row, "response": "hi"}, [])
    assert missing_turns(row, ["verl"]).endswith("(ingested as verl).")
    assert missing_turns(_row(), ["ddai-flash"]) is None
