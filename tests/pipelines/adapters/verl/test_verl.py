"""verl rollout dumps and the transcript splitter they (and DDAI's phase 1) need."""

from __future__ import annotations

import hashlib
import json

from ddai.pipelines import adapters, store
from ddai.pipelines.adapters.transcript import clean_observation, split_transcript
from ddai.pipelines.ingest import IngestConfig, ingest

# verl decodes with skip_special_tokens=True: chat headers survive as bare "user"/"assistant" lines.
PROMPT_A = "system\nYou are a search agent.\nuser\nQuestion: How many offices?\nassistant\n"
PROMPT_B = "system\nYou are a search agent.\nuser\nQuestion: Which year?\nassistant\n"
OUT = (
    "<think>find it</think>\n<search>offices</search>\nuser\n<information>Doc 1: 12 offices"
    "</information>\nassistant\n<think>found</think>\n<search_complete>true</search_complete>"
)


def _line(prompt, score, step=7, **kw):
    return json.dumps(
        {"input": prompt, "output": OUT, "gts": "12", "score": score, "step": step, **kw}
    )


def test_dump_rows_get_uid_order_and_turns(tmp_path):
    run = tmp_path / "exp_rollouts"
    run.mkdir()
    src = run / "7.jsonl"
    src.write_text(
        "\n".join(
            [
                _line(PROMPT_A, 1.0, acc=True, judge_score=1.0),
                _line(PROMPT_B, 0.0),
                _line(PROMPT_A, 0.5, uid="own"),
                _line(PROMPT_A, 0.25, step=8),
            ]
        )
        + "\n"
    )
    assert adapters.detect(src) == "verl"
    res = ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    assert res.rollouts_out == 4 and store.list_runs(tmp_path / "logs") == ["exp_rollouts"]
    rows = store.read_rollouts(tmp_path / "logs").to_pylist()
    uid_a = hashlib.sha1(PROMPT_A.encode()).hexdigest()[:12]
    assert [(r["uid"] == uid_a, r["step"], r["rollout_idx"], r["reward"]) for r in rows] == [
        (True, 7, 0, 1.0),
        (False, 7, 0, 0.0),
        (True, 7, 1, 0.5),  # second row of (7, A)
        (True, 8, 0, 0.25),  # another step: its own group
    ]
    r = rows[0]
    assert r["question"] == "How many offices?" and r["reference_answer"] == "12"
    assert r["judge_score"] == 1.0
    assert r["response"] == (
        "<think>find it</think>\n<search>offices</search>"
        "<think>found</think>\n<search_complete>true</search_complete>"
    )
    assert [t["action"] for t in r["turns"]] == ["search", "search_complete"]
    assert r["turns"][0]["observation"] == "<information>Doc 1: 12 offices</information>"
    assert r["format_ok"] is True and r["terminated"] == "complete"
    extra = json.loads(r["extra"])
    assert extra["acc"] is True and extra["output"] == OUT and extra["input"] == PROMPT_A
    assert json.loads(rows[2]["extra"])["source_uid"] == "own"  # a dumped "uid" is not the group


def test_transcript_with_chat_tokens_and_text_that_is_not_an_observation():
    text = (
        "<think>a</think>\n<search>q</search><|im_end|>\n<|im_start|>user\n<|vision_start|>"
        " [Image Paths: ./img/3_1.jpg] <|vision_end|><|im_end|>\n<|im_start|>assistant\n"
        "<think>b</think><search>r</search><search>s</search>"
        "<think>c</think>\n<bbox>[1, 2, 3, 4]</bbox><|im_end|>\n<|im_start|>user\ncrop<|im_end|>"
    )
    tr = split_transcript(text)
    assert tr.observations == 2
    assert [t["action"] for t in tr.turns] == ["search", "invalid", "bbox"]
    assert tr.turns[1]["error"] == "two actions"  # the second tag stays the policy's text
    assert tr.turns[0]["retrieved"] == ["3_1"]
    assert tr.turns[0]["observation"] == "[Image Paths: ./img/3_1.jpg]"
    assert tr.turns[2]["observation"] == "crop" and tr.turns[2]["retrieved"] is None
    assert tr.response == (
        "<think>a</think>\n<search>q</search><|im_end|>"
        "<think>b</think><search>r</search><search>s</search>"
        "<think>c</think>\n<bbox>[1, 2, 3, 4]</bbox><|im_end|>"
    )
    # prose after an action is not an environment turn: the grammar flags it
    prose = split_transcript("<think>a</think><search>q</search> then more<think>b</think>")
    assert prose.observations == 0 and prose.turns[0]["error"] == "text after the action"
    assert split_transcript("").turns == [] and split_transcript(None).response == ""


def test_clean_observation():
    assert (
        clean_observation("\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n") == "hello"
    )


def test_an_observation_after_text_after_the_action_is_still_cut():
    # the policy wrote text after its search (a grammar fault) but the search ran: the
    # observation goes, the policy's text keeps its fault and ends at its end-of-turn token
    text = (
        "<think>a</think>\n<search>q</search>\nWaiting.<|im_end|>\n<|im_start|>user\n"
        "[Image Paths: ./img/3_1.jpg]<|im_end|>\n<|im_start|>assistant\n"
        "<think>b</think>\n<search_complete>true</search_complete>"
    )
    tr = split_transcript(text)
    assert tr.observations == 1
    assert tr.response == (
        "<think>a</think>\n<search>q</search>\nWaiting.<|im_end|>"
        "<think>b</think>\n<search_complete>true</search_complete>"
    )
    assert tr.turns[0]["observation"] == "[Image Paths: ./img/3_1.jpg]"
    # a bare "user" inside the policy's own sentence is no observation
    plain = "<think>a</think>\n<search>q</search> for the user\n<think>b</think>"
    assert split_transcript(plain).observations == 0


def test_an_output_that_is_not_text_is_quarantined_not_stored_as_an_empty_rollout(tmp_path):
    """verl dumps ``output`` as the decoded response: a list, an object or a number there is a
    damaged line, not a rollout with an empty response and no turns (null stays: a rollout
    whose output was not kept)."""
    from ddai.pipelines.store import quarantine

    src = tmp_path / "exp" / "7.jsonl"
    src.parent.mkdir()
    bad = [[1], {"x": 1}, 3, True]
    lines = [_line(PROMPT_A, 1.0)] + [_line(PROMPT_B, 0.5, output=v) for v in bad]
    src.write_text("\n".join(lines) + "\n")
    for columnar in (True, False):
        logs = tmp_path / f"logs{columnar}"
        res = ingest(IngestConfig([src], logs, progress=False, columnar=columnar))
        assert (res.rows_in, res.rollouts_out, dict(res.quarantined)) == (5, 1, {"wrong type": 4})
        q = [json.loads(x) for x in quarantine.read(logs, "exp").decode().splitlines()]
        assert [x["line"] for x in q] == [2, 3, 4, 5]
        assert [x["detail"] for x in q] == [
            f"output must be a string (the decoded response), not {t}"
            for t in ("list", "dict", "int", "bool")
        ]
