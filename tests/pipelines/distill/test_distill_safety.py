"""The safety post-pass: every rule rolls back, drops or reports, and is counted."""

from __future__ import annotations

import copy
import json

from ddai.pipelines.distill import findings as fnd
from ddai.pipelines.distill import rules
from ddai.pipelines.distill.safety import (
    FORCED_COMPLETION,
    REPEATED_QUERY,
    SYSTEM_ERROR,
    Candidate,
    Drops,
    post_pass,
    reconcile,
)
from ddai.pipelines.distill.thinks import split_thinks
from ddai.pipelines.records.tags import FORCED_COMPLETION as FORCED_TEXT

SYS = {"role": "system", "content": "You are a search agent."}
Q = {"role": "user", "content": "What is the total?"}
IMG = {"role": "user", "content": [{"image": "corpus/img/1_2.jpg"}]}
ERR = {"role": "user", "content": "[System Error: Search did not return an image.]"}


def a(text: str) -> dict:
    return {"role": "assistant", "content": text}


S1 = "<think>find the chart</think>\n<search>total chart</search>"
S2 = "<think>crop the table</think>\n<bbox>[1, 2, 30, 40]</bbox>"
DONE = "<think>the total is 42</think>\n<search_complete>true</search_complete>"
TRAJ = [SYS, Q, a(S1), IMG, a(S2), IMG, a(DONE)]


def test_identity_changes_nothing_and_keeps_raw():
    raw = json.dumps(TRAJ, separators=(", ", ": "))  # not DDAI's spacing: the text is kept as is
    res = post_pass([Candidate("u", copy.deepcopy(TRAJ), None, raw)])
    assert [s.raw for s in res.samples] == [raw]
    assert res.events == [] and res.dropped == {} and res.rows_in == 1


def test_rules_two_and_three_roll_back_think_by_think():
    proposed = [
        "find the chart <search>other</search>",  # rule 2: action-tag text
        "I can see the table; crop it",  # rule 3: a new observation claim
        "The total is 42.",  # fine
    ]
    res = post_pass([Candidate("u", copy.deepcopy(TRAJ), proposed)])
    (s,) = res.samples
    assert [m["content"] for m in s.messages[2::2]] == [
        S1,
        S2,
        "<think>The total is 42.</think>\n<search_complete>true</search_complete>",
    ]
    assert s.raw is None
    assert res.rollbacks == {rules.ACTION_TAG_IN_REWRITE: 1, rules.NEW_OBSERVATION_CLAIM: 1}
    ev = {e.rule: e for e in res.events}
    claim = ev[rules.NEW_OBSERVATION_CLAIM]
    assert (claim.message, claim.think, claim.before, claim.after) == (
        4,
        0,
        "crop the table",
        proposed[1],
    )
    assert claim.detail == r"(?i)\bi can see\b"
    assert ev[rules.ACTION_TAG_IN_REWRITE].after == proposed[0]


def test_rule_four_drops_a_tagged_original_even_without_rewrite():
    tagged = [SYS, Q, a("<think>use <bbox> next</think>\n<bbox>[1, 2, 3, 4]</bbox>"), IMG, a(DONE)]
    res = post_pass([Candidate("bad", tagged), Candidate("ok", copy.deepcopy(TRAJ))])
    assert [s.uid for s in res.samples] == ["ok"]
    assert res.dropped == {rules.ACTION_TAG_IN_ORIGINAL: 1}
    (e,) = [e for e in res.events if e.action == "drop"]
    assert (e.uid, e.message, e.think, e.before) == ("bad", 2, 0, "use <bbox> next")


def test_optional_drops_count_first_reason_only():
    forced = [SYS, Q, a(S1), ERR, a(S1), IMG, a(FORCED_TEXT)]  # forced + system error + repeat
    errs = [SYS, Q, a(S1), ERR, a(DONE)]
    repeat = [SYS, Q, a(S1), IMG, a(S1), IMG, a(DONE)]

    def cands():
        pairs = (("f", forced), ("e", errs), ("r", repeat))
        return [Candidate(u, copy.deepcopy(m)) for u, m in pairs]

    none = post_pass(cands())
    assert len(none.samples) == 3 and none.dropped == {}
    assert none.findings["rows ending in the exact forced completion"] == 1
    assert none.findings["rows with a system-error observation"] == 2
    assert none.findings["rows repeating a search query"] == 2
    all_on = post_pass(cands(), drops=Drops(forced=True, system_errors=True, repeated_queries=True))
    assert all_on.samples == []
    assert all_on.dropped == {FORCED_COMPLETION: 1, SYSTEM_ERROR: 1, REPEATED_QUERY: 1}
    only_repeat = post_pass(cands(), drops=Drops(repeated_queries=True))
    assert [s.uid for s in only_repeat.samples] == ["e"]


def test_faults_are_reported_not_dropped():
    merged = [SYS, Q, a(S1), IMG, a(DONE), a(S1), IMG, a(DONE)]
    two = [SYS, Q, a("<think>a</think>\n<think>b</think>\n<search>q</search>"), IMG, a(DONE)]
    res = post_pass([Candidate("m", merged), Candidate("t", two)])
    assert [s.uid for s in res.samples] == ["m", "t"]
    assert res.fault_rows == {"invalid-turn: two thinks": 1, fnd.MERGED_TRAJECTORIES: 1}
    assert {(e.uid, e.rule) for e in res.events} == {
        ("m", fnd.MERGED_TRAJECTORIES),
        ("t", "invalid-turn: two thinks"),
    }


def rewritten(**changes) -> list[dict]:
    w = [copy.deepcopy(m) for m in TRAJ]  # one copy per message (TRAJ reuses IMG)
    for i, content in changes.items():
        w[int(i[1:])]["content"] = content
    return w


def test_reconcile_rule_one_restores_changed_skeletons():
    w = rewritten(
        m2="<think>Find the chart.</think>\n<search>a changed query</search>",  # action changed
        m4="<think>Crop the table.</think>\n<bbox>[1, 2, 30, 40]</bbox>",  # think only: fine
        m3=[{"image": "corpus/img/9_9.jpg"}],  # an observation changed
    )
    res = post_pass([reconcile("u", TRAJ, w)])
    (s,) = res.samples
    assert s.messages[2]["content"] == S1
    assert s.messages[3] == IMG
    assert s.messages[4]["content"] == "<think>Crop the table.</think>\n<bbox>[1, 2, 30, 40]</bbox>"
    assert res.rollbacks == {rules.OUTSIDE_THINK_CHANGED: 2}
    assert all(
        split_thinks(o["content"]).skeleton == split_thinks(m["content"]).skeleton
        for o, m in zip(TRAJ[2::2], s.messages[2::2], strict=True)
    )


def test_reconcile_then_rules_two_and_three():
    # A think-only change that adds a bbox tag or a claim passes rule 1 and is caught after.
    w = rewritten(
        m2="<think>find <bbox>[0, 0, 9, 9]</bbox> the chart</think>\n<search>total chart</search>",
        m6="<think>It clearly shows 42</think>\n<search_complete>true</search_complete>",
    )
    res = post_pass([reconcile("u", TRAJ, w)])
    assert res.samples[0].messages == TRAJ
    assert res.rollbacks == {rules.ACTION_TAG_IN_REWRITE: 1, rules.NEW_OBSERVATION_CLAIM: 1}


def test_reconcile_discards_a_restructured_sample():
    res = post_pass([reconcile("u", TRAJ, TRAJ[:-2])])
    assert res.samples[0].messages == TRAJ
    assert res.discards == {rules.STRUCTURE_CHANGED: 1}


def test_forced_think_is_checked_like_any_other():
    traj = [SYS, Q, a(S1), IMG, a(FORCED_TEXT)]
    proposed = ["find the chart", "Maximum turn limit reached; <search_complete>"]
    res = post_pass([Candidate("u", copy.deepcopy(traj), proposed)])
    assert res.samples[0].messages == traj
    assert res.rollbacks == {rules.ACTION_TAG_IN_REWRITE: 1}
