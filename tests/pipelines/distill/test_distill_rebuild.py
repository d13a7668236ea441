"""Trajectory rebuild from the rollout log, observations, the system prompt and sample uids."""

from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
import pytest
from support.distill_reference import assign_uids

from ddai.pipelines.distill import rebuild as rb
from ddai.pipelines.records.schema import normalize_rollout
from ddai.pipelines.records.tags import FORCED_COMPLETION, parse_turns

T1 = "<think>find the sales chart</think>\n<search>sales 2019 chart</search>"
T2 = "<think>crop the table</think><bbox>[10, 20, 300, 400]</bbox>"
T3 = "<think>the value is 42</think>\n<search_complete>true</search_complete>"


def row(response: str, observations: list, **kw) -> dict:
    turns = [t.to_record() for t in parse_turns(response)]
    for t, obs in zip(turns, observations, strict=True):
        t.update(obs)
    rec = {
        "run_id": "r",
        "uid": "train_7",
        "rollout_idx": 1,
        "question": "How much?",
        "response": response,
    }
    return normalize_rollout({**rec, "turns": turns, **kw})


def test_messages_copy_the_turns_byte_for_byte():
    resp = T1 + "<|im_end|>" + T2 + T3 + "<|im_end|>"
    r = row(resp, [{"observation": "corpus/img/7_3.jpg"}, {"observation": "crops/ab12.png"}, {}])
    out = rb.rebuild(r, "SYS")
    assert out.messages == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "How much?"},
        {"role": "assistant", "content": T1},
        {"role": "user", "content": [{"image": "corpus/img/7_3.jpg"}]},
        {"role": "assistant", "content": T2},
        {"role": "user", "content": [{"image": "crops/ab12.png"}]},
        {"role": "assistant", "content": T3},
    ]
    assert out.unavailable == 0
    for m in out.messages[2::2]:
        (turn,) = parse_turns(m["content"])
        assert turn.valid and turn.body() == m["content"]


@pytest.mark.parametrize(
    ("turn", "content", "available"),
    [
        ({"observation": "corpus/img/1_2.JPG"}, [{"image": "corpus/img/1_2.JPG"}], True),
        (
            {"observation": '[{"image": "a.jpg"}, {"image": "b.jpg"}]'},
            [{"image": "a.jpg"}, {"image": "b.jpg"}],
            True,
        ),
        ({"observation": "Revenue 2019: 42\nCosts: 7"}, "Revenue 2019: 42\nCosts: 7", True),
        (
            {"observation": "[2019] sales.jpg table"},
            "[2019] sales.jpg table",
            True,
        ),  # text, not JSON
        ({"action": "search", "error": "no result"}, "[System Error: no result]", True),
        (
            {"action": "bbox", "error": "[System Error: BBox crop failed.]"},
            "[System Error: BBox crop failed.]",
            True,
        ),
        ({"action": "invalid", "error": "two thinks"}, rb.UNAVAILABLE, False),  # a parse error
        ({"action": "search"}, rb.UNAVAILABLE, False),
    ],
)
def test_observation_content(turn, content, available):
    assert rb.observation_content(turn) == (content, available)


def test_unavailable_observations_are_counted():
    out = rb.rebuild(row(T1 + T2 + T3, [{}, {}, {}]), "SYS")
    assert [m["content"] for m in out.messages[3::2]] == [rb.UNAVAILABLE] * 2
    assert out.unavailable == 2


def test_system_prompt_from_the_log_wins():
    r = row(T1 + T3, [{"observation": "p.jpg"}, {}], extra={"system_prompt": "FROM LOG"})
    assert rb.rebuild(r, "FROM FLAG").messages[0]["content"] == "FROM LOG"


def test_invalid_turn_keeps_its_raw_text_from_the_response():
    two = "<think>a</think>\n<think>b</think>\n<search>q</search>"
    out = rb.rebuild(row(two + T3, [{"observation": "p.jpg"}, {}], format_ok=True), "S")
    assert out.messages[2]["content"] == two


def test_without_response_turn_records_render_and_invalid_ones_fail():
    r = row(T1 + T3, [{"observation": "p.jpg"}, {}])
    r["response"] = None
    assert rb.rebuild(r, "S").messages[2]["content"] == T1
    r["turns"][0]["action"] = "invalid"
    with pytest.raises(rb.RebuildError) as e:
        rb.rebuild(r, "S")
    assert e.value.reason == rb.UNRENDERABLE


def test_rebuild_errors_name_the_reason():
    with pytest.raises(rb.RebuildError) as e:
        rb.rebuild(row(T3, [{}], question=None), "S")
    assert e.value.reason == rb.NO_QUESTION
    with pytest.raises(rb.RebuildError) as e:
        rb.rebuild(
            normalize_rollout({"run_id": "r", "uid": "u", "rollout_idx": 0, "question": "q"}), "S"
        )
    assert e.value.reason == rb.NO_TURNS


def test_forced_completion_is_copied_as_injected():
    out = rb.rebuild(row(T1 + FORCED_COMPLETION, [{"observation": "p.jpg"}, {}]), "S")
    assert out.messages[-1]["content"] == FORCED_COMPLETION


def test_bundled_prompt_is_ddai_searcher_prompt(shared):
    t = pq.read_table(shared / "ddai-data" / "slidevqa_train_6667.parquet", columns=["prompt"])
    system = t.slice(0, 1)["prompt"].to_pylist()[0][0]
    assert system["role"] == "system"
    assert rb.default_system_prompt() == system["content"]
    assert rb.load_system_prompt(None) == system["content"]


def test_system_prompt_file_is_used_as_written(tmp_path):
    p = tmp_path / "sys.txt"
    p.write_text("line one\n\nline two\n", encoding="utf-8")
    assert rb.load_system_prompt(p) == "line one\n\nline two\n"
    with pytest.raises(FileNotFoundError, match="--system-prompt"):
        rb.load_system_prompt(tmp_path / "missing.txt")


def test_run_tag():
    assert rb.run_tag("focused2_20251201_093000_2c451b12") == "2c451b12"
    assert rb.run_tag("focused2", "focused2_20251201_093000_2c451b12") == "2c451b12"
    # Not a DDAI run id (no timestamp): the first 8 hex digits of sha256(run_id).
    assert rb.run_tag("my_run_deadbeef") == hashlib.sha256(b"my_run_deadbeef").hexdigest()[:8]
    assert rb.run_tag("r") == hashlib.sha256(b"r").hexdigest()[:8] == "454349e4"


def test_sample_keys_and_uids():
    assert rb.sample_key({"uid": "train_1", "sample_idx": 84, "rollout_idx": 4}, "2c451b12") == (
        "train_1__s84__2c451b12"
    )
    assert (
        rb.sample_key({"uid": "train_1", "sample_idx": None, "rollout_idx": 4}, "t")
        == "train_1__r4__t"
    )
    keys = ["a__s1__t", "a__s1__t", "b__s2__t"]
    assert assign_uids(keys, [3, 5, 5]) == ["a__s1__t__t3", "a__s1__t__t5", "b__s2__t"]
    with pytest.raises(rb.UidCollision, match="a__s1__t"):
        assign_uids(keys, [3, 3, 5])


def test_extra_of_tolerates_bad_json():
    assert rb.extra_of({"extra": "not json"}) == {}
    assert rb.extra_of({"extra": json.dumps({"k": 1})}) == {"k": 1}
