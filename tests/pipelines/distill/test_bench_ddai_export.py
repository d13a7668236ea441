"""The DDAI distill bench's equal-work step (``bench/ddai_pandas.py distill_export``): DDAI's
selection, then the train1 messages of every selected rollout built from the unified log's events
(``bench/ddai_messages.py``) and written to Parquet, on a tiny store whose rollouts are written
by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[3] / "bench"
RUN = "grpo_20260105_ab12"  # the uid suffix is its last part
IMG = "./search_engine/corpus/img/"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import ddai_messages
    import ddai_pandas

    return ddai_pandas, ddai_messages


def _turn(idx, action, arg, *, retrieved=(), error=None, observation=None, think=None):
    return {
        "idx": idx,
        "think": think or f"step {idx}",
        "action": action,
        "arg": arg,
        "sep": "\n",
        "forced": False,
        "retrieved": list(retrieved),
        "observation": observation,
        "error": error,
        "value": None,
    }


# the hand-built rollout: a search that showed a page, a crop, a search that showed nothing,
# then search_complete
HAND_TURNS = [
    _turn(0, "search", "sales 2020", retrieved=["12_3"]),
    _turn(1, "bbox", "[1, 2, 30, 40]", observation="./agent_crops/c1.jpg"),
    _turn(2, "search", "sales 2021"),
    _turn(3, "search_complete", "true"),
]


def _rollout(uid, idx, judge, turns, *, ndcg=0.5):
    return {
        "run_id": RUN,
        "step": 0,
        "uid": uid,
        "rollout_idx": idx,
        "question": f"What does {uid} show?",
        "turns": turns,
        "retrieved_pages": [p for t in turns for p in t["retrieved"]],
        "judge_score": judge,
        "ndcg": ndcg,
        "format_ok": True,
        "reward": judge,
        "num_turns": len(turns),
        "terminated": "complete",
    }


def _done(idx=1):
    return [_turn(0, "search", "q", retrieved=["1_1"]), _turn(idx, "search_complete", "true")]


def _store(tmp_path: Path) -> list[str]:
    """Three prompts of four rollouts: ``hand`` (one success: the hand-built rollout), ``bad``
    (two successes, one with an invalid turn, which DDAI's checks drop) and ``easy`` (three
    successes of four: over the success-rate cap, not selected)."""
    import pyarrow as pa

    from ddai.pipelines import store
    from ddai.pipelines.records.schema import ROLLOUT_SCHEMA

    rows = [_rollout("hand", 0, 1.0, HAND_TURNS)]
    rows += [_rollout("hand", i, 0.0, _done()) for i in (1, 2, 3)]
    invalid = [_turn(0, "invalid", "", error="empty search"), _turn(1, "search_complete", "true")]
    rows += [_rollout("bad", 0, 1.0, _done(), ndcg=0.9), _rollout("bad", 1, 1.0, invalid)]
    rows += [_rollout("bad", i, 0.0, _done()) for i in (2, 3)]
    rows += [_rollout("easy", i, float(i < 3), _done()) for i in range(4)]
    table = pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in ROLLOUT_SCHEMA} for r in rows], schema=ROLLOUT_SCHEMA
    )
    logs = tmp_path / "logs"
    w = store.PartitionWriter(logs, RUN)
    w.add_table(table)
    w.commit({"sources": []})
    return [str(f) for f in store.parquet_files(logs, [RUN])]


def test_export_writes_the_messages_of_each_selected_rollout_ddai_keeps(tmp_path, bench):
    import pyarrow.parquet as pq

    dp, dm = bench
    unified = dp.write_inputs(_store(tmp_path), tmp_path, what=("unified_events",))
    log = unified["unified_events"]
    out = tmp_path / "train1.parquet"

    result = dp.distill_export(log, out)

    # selected: hand's success, bad's two successes; the export's selection is the selection step's
    assert result == {"selected": 3, "written": 2}
    assert dp.distill(log) == 3
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda r: r["uid"], reverse=True)
    assert [r["uid"] for r in rows] == ["hand__s0__ab12", "bad__s0__ab12"]
    assert {r["format_version"] for r in rows} == {"v1"}
    hand = json.loads(rows[0]["messages"])
    plan = "<think>step {}</think>\n<{}>{}</{}>"
    assert hand == [
        {"role": "system", "content": dm.SYSTEM_PROMPT},
        {"role": "user", "content": "What does hand show?"},
        {"role": "assistant", "content": plan.format(0, "search", "sales 2020", "search")},
        {"role": "user", "content": [{"image": IMG + "12_3.jpg"}]},
        {"role": "assistant", "content": plan.format(1, "bbox", "[1, 2, 30, 40]", "bbox")},
        {"role": "user", "content": [{"image": "./agent_crops/c1.jpg"}]},
        {"role": "assistant", "content": plan.format(2, "search", "sales 2021", "search")},
        {"role": "user", "content": dm.SEARCH_ERROR},
        {"role": "assistant", "content": plan.format(3, "search_complete", "true", "search_complete")},
    ]  # fmt: skip
    # compact JSON, as DDAI writes it
    assert rows[0]["messages"] == json.dumps(hand, ensure_ascii=False, separators=(",", ":"))


def _ev(kind, ts, **fields):
    return {"uid": "u", "sample_idx": 3, "event_type": kind, "ts": ts, **fields}


def _plan(ts, text):
    return _ev("model.plan", ts, text=text)


def _events(*middle):
    reward = _ev("rm.flash.detail", 99, query="Which year?\n assistant: <think>", run_id="x_y_z9")
    return [reward, *middle]


def test_messages_follow_ddai_rules_for_order_images_and_errors(bench):
    _, dm = bench
    search = "<think>a</think>\n<search>q1</search><|im_end|>  "
    lines = _events(
        # out of line order: the log's ts orders them
        _ev("tool.search.response", 3, results=[{"image_file": "p1"}, {"image_file": "p2"}]),
        _plan(2, "<think>b</think> <search>q2</search>"),
        _ev("tool.search.response", 1, results=[{"image_file": "p1"}]),
        _plan(0, search),
        _plan(4, "<think>c</think>\n<bbox>[1.5, 2, 3, 4]</bbox>"),
        _ev("tool.bbox.result", 5.0, crop_path=""),  # not paid: the crop owed has no path...
        _plan(6, "<think>d</think>\n<search_complete> TRUE </search_complete>"),
        {"uid": "other", "sample_idx": 3, "event_type": "model.plan", "text": "x"},
    )
    groups = dm.events_by_rollout(lines)
    assert sorted(groups) == [("other", 3), ("u", 3)]
    events = groups[("u", 3)]
    assert [e["ts"] for e in events] == [0, 1, 2, 3, 4, 5.0, 6, 99]
    # ...an empty crop path drops the rollout, as DDAI's export does
    assert dm.messages_of(events) is None

    events = [e for e in events if e["event_type"] != "tool.bbox.result"]
    got = dm.messages_of(events)
    assert got[1:] == [
        {"role": "user", "content": "Which year?"},
        {"role": "assistant", "content": "<think>a</think>\n<search>q1</search>"},
        {"role": "user", "content": [{"image": "p1"}]},
        {"role": "assistant", "content": "<think>b</think> <search>q2</search>"},
        {"role": "user", "content": [{"image": "p2"}]},  # p1 was shown: the next result
        {"role": "assistant", "content": "<think>c</think>\n<bbox>[1.5, 2, 3, 4]</bbox>"},
        {"role": "user", "content": dm.BBOX_ERROR},  # owed before the next plan
        {"role": "assistant", "content": "<think>d</think>\n<search_complete> TRUE </search_complete>"},
    ]  # fmt: skip
    assert dm.train1_row("u", 3, events)["uid"] == "u__s3__z9"


@pytest.mark.parametrize(
    "plans",
    [
        ["<think>a</think>\n<bbox>[1, 2, 3]</bbox>", "<think>b</think>\n<search_complete>true</search_complete>"],  # three numbers
        ["<think>a</think>\n<bbox>[1, nan, 3, 4]</bbox>", "<think>b</think>\n<search_complete>true</search_complete>"],  # not a number
        ["<think>a</think>\nso: <search>q</search>", "<think>b</think>\n<search_complete>true</search_complete>"],  # text before the action
        ["<think>a</think>\n<search> </search>", "<think>b</think>\n<search_complete>true</search_complete>"],  # blank query
        ["<think>a</think>\n<search>q</search>", "<think>b</think>\n<search_complete>false</search_complete>"],  # never completes
    ],
)  # fmt: skip
def test_messages_drop_what_ddai_drops(bench, plans):
    _, dm = bench
    events = _events(*(_plan(i, text) for i, text in enumerate(plans)))
    assert dm.messages_of(events) is None


def test_messages_drop_a_search_whose_response_has_no_results(bench):
    _, dm = bench
    done = _plan(2, "<think>b</think>\n<search_complete>true</search_complete>")
    ok = _events(_plan(0, "<think>a</think>\n<search>q</search>"), done)
    assert dm.messages_of(ok)[-2]["content"] == dm.SEARCH_ERROR  # no response: an error message
    empty = _events(*ok[1:2], _ev("tool.search.response", 1, results=[]), done)
    assert dm.messages_of(empty) is None
