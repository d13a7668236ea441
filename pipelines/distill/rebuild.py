"""Rebuild a rollout of the log as a train1 message list, and name it.

Messages: ``system`` (the Searcher prompt), ``user`` (the question), then per turn an ``assistant``
message (think + the separator as written + the action: ``Turn.body()``) and, after every turn but
the last, the observation as a ``user`` message. The observation is the turn's ``observation``:
an image path becomes ``[{"image": path}]``, a JSON list of content blocks is kept as that list,
any other text (page text, a crop's text, an error) stays text; with no observation, an
environment error becomes ``[System Error: …]``, else ``[observation unavailable]`` (counted).

Sample uids follow DDAI: ``{uid}__s{sample_idx}__{tag}`` (``__r{rollout_idx}`` when the source has
no ``sample_idx``), plus ``__t{step}`` when the same key repeats across steps; ``tag`` is the
trailing 8 hex digits of a DDAI run id (``{experiment}_{YYYYmmdd_HHMMSS}_{8 hex}``: the row's
``run_id``, else ``extra.source_run_id``), else the first 8 hex digits of sha256(run_id).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ddai.pipelines.distill.findings import SYSTEM_ERROR_RE, Fields
from ddai.pipelines.distill.thinks import Message
from ddai.pipelines.records.tags import Turn, parse_turns, turn_text

UNAVAILABLE = "[observation unavailable]"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp")
DDAI_RUN_ID_RE = re.compile(r"_\d{8}_\d{6}_([0-9a-f]{8})$")

# Rebuild failures (counted drops; stable identifiers).
NO_QUESTION = "no_question"
NO_TURNS = "no_turns"
UNRENDERABLE = "invalid_turn_without_raw_text"  # an invalid turn, and no response to cut it from


class RebuildError(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def default_system_prompt() -> str:
    """The bundled DDAI Searcher system prompt (the RL prompt of DDAI's SlideVQA set)."""
    res = resources.files("ddai.pipelines").joinpath("prompts", "searcher_system.txt")
    return res.read_text(encoding="utf-8")


def load_system_prompt(path: str | os.PathLike[str] | None) -> str:
    """``path``'s text exactly as written (no stripping), else the bundled prompt."""
    if path is None:
        return default_system_prompt()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--system-prompt {p}: no such file; pass a text file or omit it")
    return p.read_text(encoding="utf-8")


def extra_of(row: dict[str, Any]) -> dict[str, Any]:
    try:
        extra = json.loads(row.get("extra") or "{}")
    except ValueError:
        return {}
    return extra if isinstance(extra, dict) else {}


@functools.lru_cache(maxsize=1024)  # a handful of runs, called once per rollout
def run_tag(run_id: str, source_run_id: str | None = None) -> str:
    for rid in (run_id, source_run_id):
        m = DDAI_RUN_ID_RE.search(rid or "")
        if m:
            return m.group(1)
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:8]


def sample_key(row: dict[str, Any], tag: str) -> str:
    if row.get("sample_idx") is not None:
        return f"{row['uid']}__s{row['sample_idx']}__{tag}"
    return f"{row['uid']}__r{row['rollout_idx']}__{tag}"


class UidCollision(ValueError):
    pass


def _is_image_path(text: str) -> bool:
    return "\n" not in text and text.strip().lower().endswith(IMAGE_SUFFIXES)


def observation_content(turn: dict[str, Any]) -> tuple[str | list[dict[str, Any]], bool]:
    """A turn's observation as message content, and whether the log had one."""
    obs = turn.get("observation")
    if obs:
        if obs.lstrip().startswith("["):
            try:
                blocks = json.loads(obs)
            except ValueError:
                blocks = None
            if isinstance(blocks, list) and blocks and all(isinstance(b, dict) for b in blocks):
                return blocks, True
        if _is_image_path(obs):
            return [{"image": obs}], True
        return obs, True
    err = turn.get("error") if turn.get("action") != "invalid" else None
    if err:
        return (err if SYSTEM_ERROR_RE.match(err) else f"[System Error: {err}]"), True
    return UNAVAILABLE, False


def _bodies(
    row: dict[str, Any], records: list[dict[str, Any]]
) -> tuple[list[str], list[Turn | Fields]]:
    """Each turn's text: from the raw response when it parses into the logged turns (it keeps
    the raw text of invalid turns), else from the structured turn records; and, per text, what
    ``findings.inspect`` may read instead of parsing it again: a valid parsed turn (its body
    parses back into it), or the record's fields (``tags.known_forced`` tells from them alone
    whether the text is that one turn)."""
    response = row.get("response")
    if response:
        parsed = parse_turns(response)
        if len(parsed) == len(records):
            return [t.body() for t in parsed], [t if t.valid else None for t in parsed]
    out, known = [], []
    for r in records:
        action = r.get("action")
        if action == "invalid":
            raise RebuildError(UNRENDERABLE)
        fields = (r.get("think"), action, r.get("arg"), r.get("sep"))
        out.append(turn_text(*fields))
        known.append(fields)
    return out, known


@dataclass(frozen=True)
class Rebuilt:
    """``turns``: per message, the turn its text parses into where known, or the record fields
    it was written from (``Fields``); None: parse it."""

    messages: list[Message]
    unavailable: int
    turns: list[Turn | Fields | None] = field(default_factory=list)


def rebuild(
    row: dict[str, Any], system_prompt: str, extra: dict[str, Any] | None = None
) -> Rebuilt:
    """The train1 messages of one rollout-log row (``system_prompt`` unless the log has one);
    ``extra``: ``extra_of(row)`` when the caller has read it already."""
    question = row.get("question")
    if not question:
        raise RebuildError(NO_QUESTION)
    records = list(row.get("turns") or [])
    if not records:
        raise RebuildError(NO_TURNS)
    bodies, known = _bodies(row, records)
    system = (extra if extra is not None else extra_of(row)).get("system_prompt")
    messages: list[Message] = [
        {"role": "system", "content": system if isinstance(system, str) else system_prompt},
        {"role": "user", "content": question},
    ]
    turns: list[Turn | Fields | None] = [None, None]
    unavailable = 0
    for i, (body, rec, t) in enumerate(zip(bodies, records, known, strict=True)):
        messages.append({"role": "assistant", "content": body})
        turns.append(t)
        if i < len(records) - 1:
            content, available = observation_content(rec)
            unavailable += not available
            messages.append({"role": "user", "content": content})
            turns.append(None)
    return Rebuilt(messages, unavailable, turns)
