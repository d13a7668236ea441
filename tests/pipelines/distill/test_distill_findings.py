"""Think bodies in message text, and what a trajectory holds (forced completions, faults, ...)."""

from __future__ import annotations

import pytest

from ddai.pipelines.distill import findings as fnd
from ddai.pipelines.distill.thinks import split_thinks, think_slots, with_thinks
from ddai.pipelines.records.tags import FORCED_COMPLETION

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


def _cases() -> list[tuple[str | None, str, str | None, str | None]]:
    """(think, action, arg, sep): canonical turns and every way a field can make the text read
    otherwise than the fields say."""
    return [
        ("find it", "search", "q", "\n"),
        ("find it", "search", "q", ""),
        ("find it", "search", "  ", "\n"),  # empty search
        ("look <search>x</search>", "search", "q", "\n"),  # a tag in the think
        ("plan", "search", "a</search><search>b", "\n"),  # a tag in the argument
        ("plan", "search", "q", " so \n"),  # text between think and action
        ("crop", "bbox", "[10, 20, 300, 400]", "\n"),
        ("crop", "bbox", "[300, 20, 10, 400]", "\n"),  # a box upside down
        ("crop", "bbox", "[1, 2, 3]", "\n"),
        ("done", "search_complete", "true", "\n"),
        ("done", "search_complete", "TRUE ", "\n"),
        ("done", "search_complete", "false", "\n"),
        ("Maximum turn limit reached. Trigger search_complete.", "search_complete", "true", ""),
        ("a <answer> tag", "search_complete", "true", "\n"),
        ("<think>nested", "search", "q", "\n"),
        (None, "search", "q", "\n"),
        ("x", "invalid", None, None),
        ("x", "answer", "42", "\n"),
    ]


def test_known_turn_is_what_the_parser_reads_or_none():
    from ddai.pipelines.records.tags import Turn, known_turn, parse_turns

    told = 0
    for think, action, arg, sep in _cases():
        t = known_turn(0, think, action, arg, sep)
        if t is None:
            continue
        told += 1
        body = Turn(0, think, action, arg, sep).body()
        assert parse_turns(body) == [t] and t.body() == body, (think, action, arg, sep)
    assert told == 6  # the canonical ones, and no other


def test_inspect_with_known_turns_finds_what_parsing_finds(shared):
    """On DDAI's published distillation output: every assistant text parsed, its turn given as
    known when it is one valid turn; the findings (and think slots) are the same."""
    from ddai.pipelines.distill import formats
    from ddai.pipelines.records.tags import known_turn, parse_turns

    samples, _ = formats.read(
        shared / "ddai-data" / "after_focus_half_or_less_sft.v2.rewritten.safe.parquet"
    )
    given = 0
    for s in samples:
        known = []
        for m in s.messages:
            turns = parse_turns(m["content"]) if m["role"] == "assistant" else []
            t = turns[0] if len(turns) == 1 else None
            k = t and known_turn(0, t.think, t.action, t.arg, t.sep)
            given += k is not None
            known.append(k)
        a, b = fnd.inspect(s.messages, known), fnd.inspect(s.messages)
        assert a == b and a.slots == b.slots and a.error_observations == b.error_observations
    assert given > 1000


def test_inspect_with_record_fields_finds_what_parsing_finds():
    """A rollout rebuilt from its turn records hands ``inspect`` each turn's fields: told from
    them where ``known_forced`` can, parsed where not; the findings are the parser's own, for
    every way a field can make the text read otherwise (pairs of turns, so a faulty turn sits
    before and after a canonical one, as the last turn and mid-trajectory)."""
    from ddai.pipelines.distill.rebuild import rebuild

    cases = [c for c in _cases() if c[1] != "invalid"]  # an invalid record is not rebuilt
    cases += [
        ("Max turn limit hit", "search_complete", "true", "\n"),
        ("x", "search", "q", "\u2003"),
    ]
    told = 0
    for first in cases:
        for last in cases:
            recs = [
                {"idx": i, "think": t, "action": a, "arg": g, "sep": s, "observation": obs}
                for i, ((t, a, g, s), obs) in enumerate(
                    [(first, "[System Error: timeout]"), (last, None)]
                )
            ]
            rb = rebuild({"question": "q?", "turns": recs}, "sys")
            told += sum(type(k) is tuple for k in rb.turns)
            a, b = fnd.inspect(rb.messages, rb.turns), fnd.inspect(rb.messages)
            assert a == b, (first, last)
            assert a.slots == b.slots and a.error_observations == b.error_observations
    assert told == 2 * len(cases) ** 2
