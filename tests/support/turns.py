"""Parsed turns written back as text: the check that ``ddai.pipelines.records.tags.parse_turns`` loses
nothing (``render_turns(parse_turns(text)) == text`` for every input); and a logged turn built for
a test's rows."""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.tags import Turn


def render_turns(turns: list[Turn]) -> str:
    """The text ``turns`` were cut from: each turn's ``render()``, in order."""
    return "".join(t.render() for t in turns)


def turn_row(idx: int, action: str, arg: str | None, *, think: str = "t", **fields: Any) -> dict:
    """A rollout's ``turns`` entry as the log holds it (``sep`` a newline); ``fields``: the rest
    (``forced``, ``retrieved``, ``observation``, ``value``...)."""
    return {"idx": idx, "think": think, "action": action, "arg": arg, "sep": "\n", **fields}
