"""Think bodies inside message texts: cut a text at its ``<think>…</think>`` bodies and put it back.

The safety comparison must find the thinks even where a rewrite broke the grammar (an action tag
inside a think, two thinks in one turn), which is exactly where ``parse_turns`` reports an
invalid turn; so the bodies are located by their tags alone, first ``<think>`` to the next
``</think>``. Everything else, tags included, is the *skeleton* that must stay byte-identical.
The grammar itself (turns, actions, forced completions) is read with ``ddai.pipelines.records.tags``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddai.pipelines.records.tags import parse_turns

THINK_BODY_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)

Message = dict[str, Any]


@dataclass(frozen=True)
class ThinkSplit:
    """``text == skeleton[0] + thinks[0] + skeleton[1] + … + thinks[n-1] + skeleton[n]``."""

    skeleton: tuple[str, ...]
    thinks: tuple[str, ...]

    def join(self, thinks: Sequence[str] | None = None) -> str:
        """The text with ``thinks`` (default: the original ones) in the think bodies."""
        bodies = self.thinks if thinks is None else thinks
        if len(bodies) != len(self.thinks):
            raise ValueError(f"{len(bodies)} thinks given for {len(self.thinks)} think bodies")
        parts = [self.skeleton[0]]
        for body, rest in zip(bodies, self.skeleton[1:], strict=True):
            parts += [body, rest]
        return "".join(parts)


def split_thinks(text: str) -> ThinkSplit:
    skeleton, thinks, pos = [], [], 0
    for m in THINK_BODY_RE.finditer(text):
        skeleton.append(text[pos : m.start(1)])
        thinks.append(m.group(1))
        pos = m.end(1)
    skeleton.append(text[pos:])
    return ThinkSplit(tuple(skeleton), tuple(thinks))


@dataclass(frozen=True)
class Slot:
    """One think body of a trajectory: its message, its position there, and its text."""

    message: int
    index: int
    text: str
    forced: bool


def is_assistant_text(m: Message) -> bool:
    return m.get("role") == "assistant" and isinstance(m.get("content"), str)


def think_slots(messages: Sequence[Message]) -> list[Slot]:
    """Every think body of the assistant messages, in order.

    ``forced`` marks the think of a forced max-turn completion: the environment wrote it, not the
    policy, so the rewrite leaves it as it is.
    """
    slots: list[Slot] = []
    for i, m in enumerate(messages):
        if not is_assistant_text(m):
            continue
        turns = parse_turns(m["content"])
        forced = len(turns) == 1 and turns[0].forced
        for j, body in enumerate(split_thinks(m["content"]).thinks):
            slots.append(Slot(i, j, body, forced))
    return slots


def with_thinks(messages: Sequence[Message], slots: Sequence[Slot], bodies: Sequence[str]):
    """A copy of ``messages`` with slot ``k``'s think body replaced by ``bodies[k]``."""
    if len(slots) != len(bodies):
        raise ValueError(f"{len(bodies)} thinks given for {len(slots)} slots")
    per_message: dict[int, dict[int, str]] = {}
    for s, body in zip(slots, bodies, strict=True):
        per_message.setdefault(s.message, {})[s.index] = body
    out = [dict(m) for m in messages]
    for i, new in per_message.items():
        split = split_thinks(out[i]["content"])
        out[i]["content"] = split.join([new.get(j, t) for j, t in enumerate(split.thinks)])
    return out
