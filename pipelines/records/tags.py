"""The Searcher's tag grammar: one parser for ingest, distillation, the trainer and reports.

A turn is ``<think>…</think>`` + a separator (kept exactly as written) + exactly one action:
``<search>q</search>``, ``<bbox>[x1,y1,x2,y2]</bbox>`` or ``<search_complete>true</search_complete>``.
Anything else becomes a turn with ``action == "invalid"`` and a reason in ``error``.

The parser never raises on model text. Every turn keeps the raw text it was cut from (``raw``),
plus the whitespace / chat-template residue around it (``prefix``, ``suffix``), so
``"".join(t.render() for t in parse_turns(text)) == text`` for every input, and a valid turn re-renders from its
structured fields byte for byte.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("search", "bbox", "search_complete")
FORCED_COMPLETION = (
    "<think>Maximum turn limit reached. Trigger search_complete.</think>"
    "<search_complete>true</search_complete>"
)
FORCED_THINK_RE = re.compile(r"(?i)max(imum)?\s+turn\s+limit")
# Chat-template residue tolerated around turns (Qwen / ChatML family and common EOS markers).
RESIDUE_RE = re.compile(
    r"(?:\s|<\|im_end\|>|<\|endoftext\|>|<\|im_start\|>(?:assistant)?|</s>|<\|eot_id\|>)*"
)
# Any action-like tag, as DDAI's safety rules define it: '<', optional '/', optional spaces, a name.
ACTION_TAG_TEXT_RE = re.compile(r"<\s*/?\s*(?:search_complete|search|bbox|answer)\b", re.IGNORECASE)
_TAG_RE = re.compile(r"<(/?)(think|search_complete|search|bbox|answer)>")


@dataclass
class Turn:
    """One parsed Searcher turn.

    ``action`` is one of ``search``, ``bbox``, ``search_complete`` or ``invalid``; ``arg`` is the
    action's inner text as written; ``sep`` the exact text between ``</think>`` and the action;
    ``error`` the reason for an invalid turn. ``retrieved``, ``observation`` and ``value`` are filled
    by the environment, ingest adapters or ``ddai value score``, not by the parser.
    """

    idx: int
    think: str | None
    action: str
    arg: str | None
    sep: str | None
    forced: bool = False
    retrieved: list[str] | None = None
    observation: str | None = None
    error: str | None = None
    value: float | None = None
    raw: str = field(default="", repr=False, compare=False)
    prefix: str = field(default="", repr=False, compare=False)
    suffix: str = field(default="", repr=False, compare=False)

    @property
    def valid(self) -> bool:
        return self.action != "invalid"

    def action_text(self) -> str:
        """The action tag as the policy wrote it (empty for invalid turns)."""
        if not self.valid:
            return ""
        return f"<{self.action}>{self.arg}</{self.action}>"

    def body(self) -> str:
        """Think + separator + action, without the surrounding residue (what SFT trains on)."""
        if not self.valid:
            return self.raw.strip()
        return turn_text(self.think, self.action, self.arg, self.sep)

    def render(self) -> str:
        if not self.valid:
            return self.raw
        return f"{self.prefix}{self.body()}{self.suffix}"

    def to_record(self) -> dict[str, Any]:
        """The rollout-log struct (DESIGN.md ``turns``): no raw/prefix/suffix."""
        # A plain field copy: ``dataclasses.asdict`` deep-copies and dominated ingest time.
        return {
            "idx": self.idx,
            "think": self.think,
            "action": self.action,
            "arg": self.arg,
            "sep": self.sep,
            "forced": self.forced,
            "retrieved": list(self.retrieved) if self.retrieved is not None else None,
            "observation": self.observation,
            "error": self.error,
            "value": self.value,
        }


def _residue_end(text: str, pos: int) -> int:
    return RESIDUE_RE.match(text, pos).end()


def _segments(text: str) -> list[tuple[int, int]]:
    """Cut text into turn spans: each ends after its action's closing tag plus trailing residue.

    Further action tags before the next ``<think>`` stay in the same span (so they are reported as
    "two actions", and trailing prose as "text after the action").
    """
    spans: list[tuple[int, int]] = []
    start, pos, n = 0, 0, len(text)
    while pos < n:
        m = _TAG_RE.search(text, pos)
        if m is None:
            break
        closing, name = m.group(1) == "/", m.group(2)
        if closing and name in (*ACTIONS, "answer"):
            end = m.end()
            # Extend over anything up to the next <think>: residue, extra actions or prose.
            nxt = text.find("<think>", end)
            stop = n if nxt < 0 else nxt
            spans.append((start, stop))
            start = pos = stop
            continue
        pos = m.end()
    if start < n:
        if spans and RESIDUE_RE.fullmatch(text, start):
            spans[-1] = (spans[-1][0], n)
        else:
            spans.append((start, n))
    return spans


def _bbox_ok(arg: str) -> bool:
    try:
        box = json.loads(arg)
    except (ValueError, RecursionError):
        return False
    if not isinstance(box, list) or len(box) != 4:
        return False
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in box):
        return False
    if not all(math.isfinite(v) for v in box):
        return False
    x1, y1, x2, y2 = box
    return x1 < x2 and y1 < y2


def _parse_one(idx: int, raw: str) -> Turn:
    def invalid(reason: str, think: str | None = None, arg: str | None = None) -> Turn:
        return Turn(idx, think, "invalid", arg, None, error=reason, raw=raw)

    lead = _residue_end(raw, 0)
    prefix = raw[:lead]
    opens = [m for m in _TAG_RE.finditer(raw) if m.group(1) == "" and m.group(2) == "think"]
    if not opens:
        return invalid("no think")
    if opens[0].start() != lead:
        return invalid("text before think")
    if len(opens) > 1:
        return invalid("two thinks")
    close = raw.find("</think>", opens[0].end())
    if close < 0:
        return invalid("unclosed think")
    think = raw[opens[0].end() : close]
    after = close + len("</think>")
    actions = [
        m for m in _TAG_RE.finditer(raw, after) if m.group(1) == "" and m.group(2) != "think"
    ]
    if not actions:
        return invalid("no action", think)
    first = actions[0]
    name = first.group(2)
    sep = raw[after : first.start()]
    end_tag = f"</{name}>"
    close_a = raw.find(end_tag, first.end())
    arg = raw[first.end() : close_a] if close_a >= 0 else raw[first.end() :]
    if len(actions) > 1:
        return invalid("two actions", think, arg)
    if "</think>" in raw[after:]:
        return invalid("two thinks", think, arg)
    if sep.strip():
        return invalid("text between think and action", think, arg)
    if close_a < 0:
        return invalid(f"unclosed {name}", think, arg)
    if name == "answer":
        return invalid("answer tag is not a searcher action", think, arg)
    tail_start = close_a + len(end_tag)
    tail_end = _residue_end(raw, tail_start)
    if tail_end != len(raw):
        return invalid("text after the action", think, arg)
    if name == "search" and not arg.strip():
        return invalid("empty search", think, arg)
    if name == "bbox" and not _bbox_ok(arg):
        return invalid("bad bbox", think, arg)
    if name == "search_complete" and arg.strip().lower() != "true":
        return invalid("search_complete must be true", think, arg)
    forced = name == "search_complete" and bool(FORCED_THINK_RE.search(think))
    return Turn(
        idx,
        think,
        name,
        arg,
        sep,
        forced=forced,
        raw=raw,
        prefix=prefix,
        suffix=raw[tail_start:],
    )


def turn_text(think: str | None, action: str, arg: str | None, sep: str | None) -> str:
    """A valid turn's canonical text from its fields (``Turn.body()``; no ``Turn`` is built)."""
    return f"<think>{think}</think>{sep}<{action}>{arg}</{action}>"


def known_forced(think: str | None, action: str, arg: str | None, sep: str | None) -> bool | None:
    """``known_turn``'s verdict without building the turn: None where only the parser can tell,
    else whether the turn the parser reads from ``turn_text`` of these fields is forced."""
    if action not in ACTIONS or think is None or arg is None or sep is None:
        return None
    if sep and sep.strip():
        return None
    # both tag patterns start with '<': text without one holds no tag (most thinks and arguments)
    if ("<" in think and _TAG_RE.search(think)) or ("<" in arg and _TAG_RE.search(arg)):
        return None
    if action == "search":
        return None if not arg.strip() else False
    if action == "bbox":
        return False if _bbox_ok(arg) else None
    if arg.strip().lower() != "true":
        return None
    return FORCED_THINK_RE.search(think) is not None


def known_turn(
    idx: int, think: str | None, action: str, arg: str | None, sep: str | None
) -> Turn | None:
    """The turn ``parse_turns`` reads from the canonical text of these fields (``Turn.body()``),
    told from the fields alone, or None where only the parser can tell (it may read the text
    otherwise): a valid action whose think and argument hold no tag and whose separator is
    whitespace, so the text is one turn, cut the parser's way; the argument checks and the
    forced-completion test are the parser's own."""
    forced = known_forced(think, action, arg, sep)
    if forced is None:
        return None
    return Turn(idx, think, action, arg, sep, forced=forced)


def parse_turns(text: str | None) -> list[Turn]:
    """Parse a Searcher response into turns; never raises on model text.

    >>> [t.action for t in parse_turns("<think>a</think>\\n<search>q</search>")]
    ['search']
    """
    if not text:
        return []
    return [_parse_one(i, text[a:b]) for i, (a, b) in enumerate(_segments(text))]


def parse_turn(text: str) -> Turn:
    """Parse text that should hold exactly one turn (e.g. one ``model.plan`` event)."""
    turns = parse_turns(text)
    if len(turns) == 1:
        return turns[0]
    if not turns:
        return Turn(0, None, "invalid", None, None, error="empty turn", raw=text or "")
    return Turn(0, None, "invalid", None, None, error="more than one turn", raw=text)


def is_format_ok(turns: list[Turn]) -> bool:
    """DDAI's format gate: every turn valid and the last action is ``search_complete``.

    Stricter than DDAI's checker (``lsm_tmp/simple_format_checker.py``) where the grammar is: a
    bbox must be ordered (x1 < x2, y1 < y2; DDAI took any four numbers) and nothing may follow the
    action (DDAI only counted action tags), so such a rollout is gated to 0 here and was not in
    DDAI's phase 1. DESIGN.md's grammar is the contract; the difference is kept on purpose."""
    return bool(turns) and all(t.valid for t in turns) and turns[-1].action == "search_complete"


def holds_action_tag(text: str | None) -> bool:
    # the pattern starts with '<': a text without one is told without the regex
    return bool(text) and "<" in text and ACTION_TAG_TEXT_RE.search(text) is not None


def terminated_from(turns: list[Turn], max_turns: int | None = None) -> str:
    """Termination reason derived from parsed turns: complete, max_turns or invalid."""
    if not turns:
        return "invalid"
    last = turns[-1]
    if last.action == "search_complete":
        return "max_turns" if last.forced else "complete"
    if max_turns is not None and len(turns) >= max_turns:
        return "max_turns"
    return "invalid"
