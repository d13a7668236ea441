"""Parsed turns written back as text: the check that ``ddai.pipelines.records.tags.parse_turns`` loses
nothing (``render_turns(parse_turns(text)) == text`` for every input)."""

from __future__ import annotations

from ddai.pipelines.records.tags import Turn


def render_turns(turns: list[Turn]) -> str:
    """The text ``turns`` were cut from: each turn's ``render()``, in order."""
    return "".join(t.render() for t in turns)
