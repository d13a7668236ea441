"""Think bodies in message text, and what a trajectory holds (forced completions, faults, ...)."""

from __future__ import annotations

import pytest

from ddai.pipelines.distill import findings as fnd
from ddai.pipelines.distill.thinks import split_thinks, think_slots, with_thinks
from ddai.pipelines.tags import FORCED_COMPLETION

SYS = {"role": "system", "content": "You are a search agent."}
Q = {"role": "user", "content": "What is the total?"}
IMG = {"role": "user", "content": [{"image": "corpus/img/1_2.jpg"}]}


def a(text: str) -> dict:
    return {"role": "assistant", "content": text}


SEARCH = "<think>find the chart</think>\n<search>total chart</search>"
DONE = "<think>the value is there</think>\n<search_complete>true</search_complete>"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no thinks at all",
        SEARCH,
        "<think>a</think><think>b</think>\n<bbox>[1, 2, 3, 4]</bbox>",
        "<think>has <bbox> inside</think>\n<bbox>[1,2,3,4]</bbox>",
        "<think>unclosed",
        "<think></think><search>x</search>",
    ],
)
def test_split_join_is_identity(text):
    s = split_thinks(text)
    assert s.join() == text
    assert len(s.skeleton) == len(s.thinks) + 1


def test_split_finds_bodies_even_when_the_grammar_breaks():
    s = split_thinks("<think>has <bbox> inside</think>\n<bbox>[1,2,3,4]</bbox>")
    assert s.thinks == ("has <bbox> inside",)
    assert s.skeleton == ("<think>", "</think>\n<bbox>[1,2,3,4]</bbox>")
    assert s.join(["X"]) == "<think>X</think>\n<bbox>[1,2,3,4]</bbox>"
    with pytest.raises(ValueError, match="1 think bodies"):
        s.join(["x", "y"])


def test_slots_and_with_thinks():
    msgs = [SYS, Q, a(SEARCH), IMG, a(FORCED_COMPLETION)]
    slots = think_slots(msgs)
    assert [(s.message, s.index, s.text, s.forced) for s in slots] == [
        (2, 0, "find the chart", False),
        (4, 0, "Maximum turn limit reached. Trigger search_complete.", True),
    ]
    out = with_thinks(msgs, slots, ["find it", slots[1].text])
    assert out[2]["content"] == "<think>find it</think>\n<search>total chart</search>"
    assert out[4] == msgs[4] and out[3] is not msgs[3]
    assert msgs[2]["content"] == SEARCH  # the input is not modified


def test_clean_trajectory_has_no_findings():
    f = fnd.inspect([SYS, Q, a(SEARCH), IMG, a(DONE)])
    assert f == fnd.Findings(None, 0, 0, (), (), ())


def test_forced_exact_and_paraphrase():
    exact = fnd.inspect([SYS, Q, a(SEARCH), IMG, a(FORCED_COMPLETION)])
    assert (exact.forced_end, exact.forced_turns) == ("exact", 1)
    para = "<think>I've hit the maximum turn limit, so I trigger search_complete.</think><search_complete>true</search_complete>"
    f = fnd.inspect([SYS, Q, a(SEARCH), IMG, a(para)])
    assert (f.forced_end, f.forced_turns) == ("paraphrase", 1)
    assert f.faults == ()  # a forced completion without separator is DDAI's own form, no fault


def test_system_errors_and_repeated_queries():
    err = {"role": "user", "content": "[System Error: BBox crop failed. Please adjust the bbox.]"}
    again = "<think>try again</think>\n<search>Total  CHART</search>"
    f = fnd.inspect([SYS, Q, a(SEARCH), err, a(again), IMG, a(DONE)])
    assert f.system_errors == 1
    assert f.repeated_queries == ("total chart",)
    assert not fnd.is_system_error("The page says [System Error: x]")  # only at the start


def test_action_tag_in_original_think_is_found():
    tagged = "<think>next I use <bbox> to crop</think>\n<bbox>[1, 2, 3, 4]</bbox>"
    f = fnd.inspect([SYS, Q, a(tagged), IMG, a(DONE)])
    assert [(s.message, s.text) for s in f.tagged_thinks] == [(2, "next I use <bbox> to crop")]


def kinds(messages) -> list[tuple[int, str]]:
    return [(x.message, x.kind) for x in fnd.inspect(messages).faults]


def test_grammar_faults():
    two = "<think>a</think>\n<think>b</think>\n<search>q</search>"
    nosep = "<think>a</think><search>q</search>"
    assert kinds([SYS, Q, a(two), IMG, a(DONE)]) == [(2, "invalid-turn: two thinks")]
    assert kinds([SYS, Q, a(nosep), IMG, a(DONE)]) == [(2, fnd.NO_SEPARATOR)]
    # Two trajectories merged: a search_complete, then a new first turn without observation.
    merged = [SYS, Q, a(SEARCH), IMG, a(DONE), a(SEARCH), IMG, a(DONE)]
    assert kinds(merged) == [(5, fnd.MERGED_TRAJECTORIES)]
    assert kinds([SYS, Q, a(SEARCH), a(SEARCH), IMG, a(DONE)]) == [(3, fnd.MISSING_OBSERVATION)]
    assert kinds([SYS, Q, a(SEARCH), IMG]) == [(3, fnd.NO_FINAL_COMPLETE)]
    assert kinds([SYS, Q, a(SEARCH + DONE)]) == [(2, fnd.TURNS_PER_MESSAGE)]
    assert kinds([Q, SYS, a(SEARCH), IMG, a(DONE)]) == [(0, fnd.ROLE_ORDER)]
