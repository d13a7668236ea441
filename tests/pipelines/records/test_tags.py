"""The tag grammar: hand-made cases for every reason, and hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.turns import render_turns

from ddai.pipelines.records.tags import (
    ACTIONS,
    FORCED_COMPLETION,
    holds_action_tag,
    is_format_ok,
    parse_turn,
    parse_turns,
    terminated_from,
)


def test_valid_turns_with_both_separators_and_residue():
    text = (
        "<think>look up revenue</think>\n<search>revenue 2019</search><|im_end|>"
        "<think>crop the table</think><bbox>[10, 20.5, 300, 400]</bbox>\n"
        "<think>done</think><search_complete>true</search_complete>"
    )
    turns = parse_turns(text)
    assert [t.action for t in turns] == ["search", "bbox", "search_complete"]
    assert [t.sep for t in turns] == ["\n", "", ""]
    assert turns[0].arg == "revenue 2019"
    assert turns[1].arg == "[10, 20.5, 300, 400]"
    assert turns[0].suffix == "<|im_end|>"
    assert all(t.error is None for t in turns)
    assert render_turns(turns) == text
    assert is_format_ok(turns)
    assert terminated_from(turns) == "complete"


def test_forced_completion_and_paraphrase():
    (t,) = parse_turns(FORCED_COMPLETION)
    assert t.action == "search_complete" and t.forced
    (p,) = parse_turns(
        "<think>I hit the max turn limit, stopping.</think><search_complete>true</search_complete>"
    )
    assert p.forced
    (n,) = parse_turns("<think>enough evidence</think><search_complete>true</search_complete>")
    assert not n.forced
    assert terminated_from([t]) == "max_turns"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<search>q</search>", "no think"),
        ("<think>a</think><think>b</think><search>q</search>", "two thinks"),
        ("<think>a</think><search>q</search><search>r</search>", "two actions"),
        ("<think>a</think><search>   </search>", "empty search"),
        ("<think>a</think><bbox>[1, 2, 3]</bbox>", "bad bbox"),
        ("<think>a</think><bbox>[5, 2, 3, 4]</bbox>", "bad bbox"),
        ("<think>a</think><bbox>[1, 4, 3, 4]</bbox>", "bad bbox"),
        ("<think>a</think><bbox>not json</bbox>", "bad bbox"),
        ("<think>a</think><search>q</search> and then I answer", "text after the action"),
        ("<think>a</think>", "no action"),
        (
            "<think>a</think><search_complete>false</search_complete>",
            "search_complete must be true",
        ),
        ("<think>a</think><answer>42</answer>", "answer tag is not a searcher action"),
        ("<think>unfinished", "unclosed think"),
        ("<think>a</think>so <search>q</search>", "text between think and action"),
        ("hello <think>a</think><search>q</search>", "text before think"),
    ],
)
def test_invalid_reasons(text, reason):
    turns = parse_turns(text)
    assert turns[0].action == "invalid"
    assert turns[0].error == reason
    assert render_turns(turns) == text
    assert not is_format_ok(turns)


def test_empty_and_single_turn_helpers():
    assert parse_turns("") == []
    assert parse_turns(None) == []
    assert parse_turn("<think>a</think><search>q</search>").action == "search"
    assert parse_turn("").error == "empty turn"
    assert parse_turn(
        "<think>a</think><search>q</search><think>b</think><search>r</search>"
    ).error == ("more than one turn")


def test_action_tag_text_detection():
    assert holds_action_tag("then I will <search> again")
    assert holds_action_tag("close it with </ bbox>")
    assert holds_action_tag("<SEARCH_COMPLETE>")
    assert not holds_action_tag("I searched the deck and found the bbox coordinates")
    assert not holds_action_tag("<searching>")


# ----------------------------------------------------------------------------- properties

_word = st.text(
    alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
_sep = st.sampled_from(["", "\n", " ", "\n\n"])
_tail = st.sampled_from(["", "<|im_end|>", "\n", "<|im_end|>\n", "<|endoftext|>"])
_num = st.integers(min_value=0, max_value=2000)


@st.composite
def valid_turn(draw):
    think = draw(_word)
    kind = draw(st.sampled_from(["search", "bbox", "search_complete"]))
    if kind == "search":
        arg = draw(_word.filter(lambda s: s.strip()))
    elif kind == "bbox":
        x1, y1 = draw(_num), draw(_num)
        arg = f"[{x1}, {y1}, {x1 + draw(st.integers(1, 500))}, {y1 + draw(st.integers(1, 500))}]"
    else:
        arg = "true"
    return f"<think>{think}</think>{draw(_sep)}<{kind}>{arg}</{kind}>{draw(_tail)}", kind, arg


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_turn(), min_size=1, max_size=6))
def test_valid_text_round_trips_byte_exact(parts):
    text = "".join(p[0] for p in parts)
    turns = parse_turns(text)
    assert [t.action for t in turns] == [p[1] for p in parts]
    assert [t.arg for t in turns] == [p[2] for p in parts]
    assert render_turns(turns) == text
    # Structured fields alone rebuild each turn's body.
    assert all(t.render() == t.prefix + t.body() + t.suffix for t in turns)


@settings(max_examples=500)
@given(st.text(max_size=300))
def test_never_raises_and_always_renders_back(text):
    turns = parse_turns(text)
    assert render_turns(turns) == text
    assert all(t.action in ("search", "bbox", "search_complete", "invalid") for t in turns)


_tagsoup = st.lists(
    st.sampled_from(
        [
            *(f"<{end}{tag}>" for tag in ("think", *ACTIONS, "answer") for end in ("", "/")),
            "true",
            "[1,2,3,4]",
            "q",
            "\n",
            "<|im_end|>",
            " x ",
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=500)
@given(_tagsoup)
def test_tag_soup_never_raises(text):
    turns = parse_turns(text)
    assert render_turns(turns) == text
    for t in turns:
        assert (t.error is None) == (t.action != "invalid")


def test_turn_record_matches_the_log_schema():
    from ddai.pipelines.records.schema import TURN_TYPE

    (t,) = parse_turns("<think>a</think><search>q</search>")
    rec = t.to_record()
    assert list(rec) == [TURN_TYPE.field(i).name for i in range(TURN_TYPE.num_fields)]
    assert rec["action"] == "search" and rec["arg"] == "q" and rec["sep"] == ""


def test_turn_fields_are_spelled_once():
    """The stored turn's fields come from ``tags.Turn``; the Arrow type names the same, in order."""
    from ddai.pipelines.adapters import ddai_common
    from ddai.pipelines.records import schema

    assert ddai_common.TURN_FIELDS == (
        "idx", "think", "action", "arg", "sep", "forced", "retrieved", "observation", "error",
        "value",
    )  # fmt: skip
    assert tuple(f.name for f in schema.TURN_TYPE) == ddai_common.TURN_FIELDS
