"""Rare-success selection: exact prompts kept and dropped, the documented tie order, counts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.query_table import connect_table

from ddai.pipelines.distill import select as sel
from ddai.pipelines.distill.select import SelectConfig, select
from ddai.pipelines.records.schema import normalize_rollout, to_table
from ddai.pipelines.store import query

DONE = "<think>done</think>\n<search_complete>true</search_complete>"
SEARCH = "<think>look</think>\n<search>q</search>"


def roll(uid, i, judge, *, reward=None, ndcg=0.0, turns=1, fmt=None, step=0, run="r"):
    response = SEARCH * (turns - 1) + DONE
    rec = {
        "run_id": run,
        "step": step,
        "uid": uid,
        "rollout_idx": i,
        "response": response,
        "judge_score": judge,
        "ndcg": ndcg,
        "reward": judge if reward is None else reward,
    }
    if fmt is not None:
        rec["format_ok"] = fmt
    return normalize_rollout(rec)


def world() -> pa.Table:
    rows = []
    # half: 2/4 successes, rate exactly 0.5: kept.
    rows += [roll("half", i, j) for i, j in enumerate([1.0, 0.0, 1.0, 0.0])]
    # zero: 0/4: dropped.
    rows += [roll("zero", i, 0.0) for i in range(4)]
    # high: 3/4 = 0.75 > 0.5: dropped.
    rows += [roll("high", i, j) for i, j in enumerate([1.0, 1.0, 1.0, 0.0])]
    # tie: 5/10 successes; key (reward desc, ndcg desc, fewer actions, rollout_idx):
    #   r1 (1.0, 0.6, 2)  r2 (1.0, 0.9, 3)  r3 (1.0, 0.9, 2)  r5 (1.0, 0.9, 2)  r6 (0.95, 1.0, 1)
    #   → r3, r5 (tie but for rollout_idx), r2 (more actions), r1 (lower ndcg), r6 (lower reward)
    spec = {
        1: (1.0, 0.6, 2),
        2: (1.0, 0.9, 3),
        3: (1.0, 0.9, 2),
        5: (1.0, 0.9, 2),
        6: (0.95, 1.0, 1),
    }
    for i in range(10):
        if i in spec:
            reward, ndcg, turns = spec[i]
            rows.append(roll("tie", i, 1.0, reward=reward, ndcg=ndcg, turns=turns))
        else:
            rows.append(roll("tie", i, 0.0, ndcg=1.0))
    # unjudged: no judge score at all.
    rows += [roll("unjudged", i, None) for i in range(2)]
    # gate: judge 1.0 with format_ok false is no success: 1/4 = 0.25, one rollout out.
    rows += [
        roll("gate", i, j, fmt=f)
        for i, (j, f) in enumerate([(1, False), (1, False), (1, True), (0, True)])
    ]
    # partial: 2 successes, 1 failure, 3 unjudged: 2/3 (not 2/6) > 0.5: dropped.
    rows += [roll("partial", i, j) for i, j in enumerate([1.0, 1.0, 0.0, None, None, None])]
    return to_table(rows)


def picked(table: pa.Table, s: sel.Selection) -> list[tuple[str, int]]:
    t = table.take(s.rows)
    return list(zip(t["uid"].to_pylist(), t["rollout_idx"].to_pylist(), strict=True))


def test_exact_selection_and_tie_order():
    t = world()
    s = select(t, SelectConfig(top_k=4))
    assert picked(t, s) == [
        ("half", 0),
        ("half", 2),
        ("tie", 3),
        ("tie", 5),
        ("tie", 2),
        ("tie", 1),
        ("gate", 2),
    ]
    assert s.prompts == {
        "seen": 7,
        "kept": 3,
        sel.NO_SUCCESS: 1,
        sel.RATE_ABOVE_MAX: 2,
        sel.NO_JUDGED: 1,
    }
    assert s.dropped == {
        sel.BEYOND_TOP_K: 1,  # tie r6
        sel.NO_JUDGED: 2,
        sel.NO_SUCCESS: 4,
        sel.NOT_SUCCESS: 2 + 5 + 3,  # half, tie, gate
        sel.RATE_ABOVE_MAX: 4 + 6,
    }
    assert len(s.rows) + sum(s.dropped.values()) == t.num_rows


def test_top_k_one_and_rate_max_one():
    t = world()
    s = select(t, SelectConfig(top_k=1, rate_max=1.0))
    assert picked(t, s) == [("half", 0), ("high", 0), ("tie", 3), ("gate", 2), ("partial", 0)]


def test_threshold_changes_success():
    t = to_table([roll("p", 0, 0.8), roll("p", 1, 0.4), roll("p", 2, 0.9)])
    assert picked(t, select(t, SelectConfig(success_threshold=0.85))) == [("p", 2)]
    assert select(t, SelectConfig(success_threshold=0.5)).rows == []  # 2/3 > 0.5


def test_same_uid_in_two_runs_is_two_prompts():
    t = to_table(
        [roll("p", 0, 1.0, run="a"), roll("p", 1, 0.0, run="a"), roll("p", 0, 1.0, run="b")]
    )
    s = select(t, SelectConfig())
    assert s.prompts["seen"] == 2 and s.prompts["kept"] == 1
    assert t.take(s.rows)["run_id"].to_pylist() == ["a"]


def test_rates_agree_with_the_prompts_at_view():
    # Kept prompts are exactly those prompts_at(threshold) puts in (0, max].
    t = world()
    con = connect_table(t)
    rates = query.run_sql(
        con, "SELECT uid, success_rate FROM prompts_at($t)", {"t": 1.0}
    ).to_pylist()
    expected = {r["uid"] for r in rates if r["success_rate"] and 0 < r["success_rate"] <= 0.5}
    assert set(t.take(select(t, SelectConfig()).rows)["uid"].to_pylist()) == expected


@pytest.mark.parametrize(
    ("kw", "msg"), [({"rate_max": 0.0}, "success-rate-max"), ({"top_k": 0}, "top-k")]
)
def test_config_errors_name_the_flag(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SelectConfig(**kw)


def test_flagged_rollouts_count_for_the_rate_but_are_never_distilled():
    # 2/4 successes, one of them kept at ingest with a lost turn: the rate stays 0.5, so the
    # prompt is kept, and only the whole success is distilled; the flagged one is counted.
    rows = [roll("p", i, j) for i, j in enumerate([1.0, 0.0, 1.0, 0.0])]
    rows[2] = normalize_rollout(
        {**rows[2], "flags": ["turns_incomplete"], "extra": None, "turns": None, "num_turns": 3}
    )
    assert rows[2]["flags"] == ["turns_incomplete"]
    got = select(to_table(rows), SelectConfig(rate_max=0.5, top_k=4))
    assert got.rows == [0]
    assert got.dropped == {"flagged_turns_incomplete": 1, "not_success": 2}
    assert got.prompts["kept"] == 1
    # unflagged, both successes are distilled
    rows[2] = roll("p", 2, 1.0)
    assert select(to_table(rows), SelectConfig(rate_max=0.5, top_k=4)).rows == [0, 2]


def test_normalize_keeps_flags_sorted_and_the_gate_unknown_when_turns_are_missing():
    whole = roll("p", 0, 1.0)
    assert whole["flags"] is None and whole["format_ok"] is True
    rec = {"run_id": "r", "uid": "p", "rollout_idx": 0, "response": DONE}
    flagged = normalize_rollout({**rec, "flags": ["turns_incomplete", "b", "b"]})
    assert flagged["flags"] == ["b", "turns_incomplete"]
    # the logged turns pass the gate, but a lost one might not have: unknown, not true
    assert flagged["format_ok"] is None
    # a logged turn that fails the gate fails the rollout, lost turns or not
    bad = normalize_rollout({**rec, "response": SEARCH, "flags": ["turns_incomplete"]})
    assert bad["format_ok"] is False
    assert normalize_rollout({**rec, "flags": []})["flags"] is None
