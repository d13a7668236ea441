"""Split a multi-turn transcript (policy turns interleaved with environment observations) apart.

verl's rollout dumps and DDAI's phase-1 ``response`` hold the whole episode as one string: the
Searcher's turns and, after each ``<search>`` / ``<bbox>``, the environment's answer. The tags are
all there is to go by, so an observation is recognised by the markers environments use: after an
action's closing tag (and the end-of-turn token the policy emitted), a chat *user* turn
(``<|im_start|>user`` or, decoded without special tokens, a bare ``user`` line) or a Search-R1
``<information>`` block, up to the next ``<think>``. Anything else after an action stays the
policy's text, where the tag grammar reports it (two actions, text after the action); an
observation that follows such text (the environment still ran the turn's first action) is cut
all the same, the policy's text ending at its last end-of-turn token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ddai.pipelines.adapters.ddai_common import basename, turn_record
from ddai.pipelines.records import tags

_CLOSE_RE = re.compile(r"</(search|bbox)>")
# Where an observation starts: a chat user turn (with its special token, or a bare "user" line
# as decoded without special tokens) or a Search-R1 information block.
_OBS_FIND_RE = re.compile(r"<\|im_start\|>user\b|(?:^|(?<=\n)|(?<=>))user\n|<information>")
_EOS_TOKEN_RE = re.compile(r"<\|im_end\|>|<\|endoftext\|>|</s>|<\|eot_id\|>")
_SPECIAL_RE = re.compile(r"<\|[^|>]*\|>")
_ROLE_HEAD_RE = re.compile(r"^\s*user\s*\n")
_ROLE_TAIL_RE = re.compile(r"\n\s*assistant\s*$")
_IMAGE_RE = re.compile(r"[\w\-./]+?\.(?:jpe?g|png|webp)\b", re.I)


@dataclass
class Transcript:
    """``response``: the policy's text with observations cut out; ``turns``: its parsed turns."""

    response: str
    turns: list[dict[str, Any]]
    observations: int


def clean_observation(raw: str) -> str:
    """An observation without chat-template tokens and role headers (``user`` … ``assistant``)."""
    text = _SPECIAL_RE.sub("", raw)
    text = _ROLE_TAIL_RE.sub("", _ROLE_HEAD_RE.sub("", text))
    return text.strip()


def images_in(text: str) -> list[str]:
    """Page basenames of the image files an observation names (``[Image Paths: 8_5.jpg]``)."""
    return [basename(m.group(0)) for m in _IMAGE_RE.finditer(text)]


def split_transcript(text: str | None) -> Transcript:
    """Cut observations out of ``text`` and attach each to the turn it answers.

    A search turn's ``retrieved`` lists the page images its observation names; every turn with an
    observation carries it, cleaned of chat-template tokens, in ``observation``.
    """
    if not text:
        return Transcript("", [], 0)
    policy: list[str] = []
    cuts: list[tuple[int, str]] = []  # (offset in the policy text, raw observation)
    plen, pos = 0, 0
    for m in _CLOSE_RE.finditer(text):
        if m.start() < pos:
            continue
        close = m.end()
        nxt = text.find("<think>", close)
        stop = len(text) if nxt < 0 else nxt
        found = _OBS_FIND_RE.search(text, close, stop)
        if found is None:
            continue
        head = text[close : found.start()]
        tokens = list(_EOS_TOKEN_RE.finditer(head))
        eos = close + (tokens[-1].end() if tokens else len(head.rstrip()))
        if not text[eos:stop].strip():
            continue
        policy.append(text[pos:eos])
        plen += eos - pos
        cuts.append((plen, text[eos:stop]))
        pos = stop
    policy.append(text[pos:])
    response = "".join(policy)
    parsed = tags.parse_turns(response)
    turns = [turn_record(t) for t in parsed]
    ends, off = [], 0
    for t in parsed:
        off += len(t.raw)
        ends.append(off)
    for cut, raw in cuts:
        i = next((k for k, end in enumerate(ends) if cut <= end), len(turns) - 1)
        if i < 0:
            continue
        obs = clean_observation(raw)
        turns[i]["observation"] = obs
        pages = images_in(obs)
        if turns[i]["action"] == "search" and pages:
            turns[i]["retrieved"] = pages
    return Transcript(response, turns, len(cuts))
