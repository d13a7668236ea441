"""What a trajectory (a train1 message list) holds that the post-pass counts, drops or reports.

Grammar faults that are not safety faults are reported, never dropped: an invalid turn (two
thinks in one turn, ...), a missing separator, a message holding other than one turn, merged
trajectories (a ``search_complete`` followed by more turns: DDAI's extractor grouped rollouts of
different steps together), roles out of order, no final ``search_complete``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddai.pipelines.distill.thinks import (
    Message,
    Slot,
    split_thinks,
    think_slots,
)
from ddai.pipelines.records.tags import FORCED_COMPLETION, Turn, holds_action_tag, parse_turns

SYSTEM_ERROR_RE = re.compile(r"^\s*\[System Error\b")

# Fault kinds.
INVALID_TURN = "invalid-turn"
NO_SEPARATOR = "no-separator"
TURNS_PER_MESSAGE = "turns-per-message"
MERGED_TRAJECTORIES = "merged-trajectories"
MISSING_OBSERVATION = "missing-observation"
ROLE_ORDER = "role-order"
NO_FINAL_COMPLETE = "no-final-search-complete"


@dataclass(frozen=True)
class Fault:
    """A grammar fault at ``message`` (index in the message list); ``kind`` is countable."""

    message: int
    kind: str
    detail: str
    text: str


@dataclass(frozen=True)
class Findings:
    """``forced_end``: ``exact`` when the last turn is DDAI's injected forced completion as
    written, ``paraphrase`` when it is another forced completion (``FORCED_THINK_RE``), else None.
    ``forced_turns``: forced completions anywhere. ``tagged_thinks``: think bodies holding
    action-tag text. ``error_observations``: user messages holding ``[System Error:`` anywhere
    (DDAI's count in ``build_train1_sft_dataset.py``; ``system_errors`` counts observations that
    start with it). ``slots``: every think body, ``think_slots(messages)`` (read from the turns
    parsed here, so a message is parsed once)."""

    forced_end: str | None
    forced_turns: int
    system_errors: int
    repeated_queries: tuple[str, ...]
    tagged_thinks: tuple[Slot, ...]
    faults: tuple[Fault, ...]
    error_observations: int = 0
    slots: tuple[Slot, ...] = field(default=(), compare=False)


def is_system_error(content: object) -> bool:
    return isinstance(content, str) and SYSTEM_ERROR_RE.match(content) is not None


def normalize_query(q: str) -> str:
    return " ".join(q.split()).casefold()


def inspect(messages: Sequence[Message], known: Sequence[Turn | None] | None = None) -> Findings:
    """What ``messages`` hold. ``known``: per message, the one turn its text parses into where
    the caller knows it (``rebuild.Rebuilt.turns``), so that text is not parsed again; None
    (or a None entry): parse it."""
    faults: list[Fault] = []
    roles = [m.get("role") for m in messages]
    if roles[:2] != ["system", "user"]:
        faults.append(Fault(0, ROLE_ORDER, f"starts with {roles[:2]}, not system, user", ""))

    forced_turns = system_errors = 0
    queries: list[str] = []
    last_turn = None
    merged_at: int | None = None
    # think bodies of assistant text misplaced among the first two messages (a role-order fault)
    slots = think_slots(messages[:2])
    ddai_errors = sum(_ddai_error(m) for m in messages[:2])
    for i, m in enumerate(messages[2:], start=2):
        content = m.get("content")
        if m.get("role") != "assistant":
            system_errors += is_system_error(content)
            ddai_errors += _ddai_error(m)
            if i > 2 and roles[i - 1] != "assistant":
                faults.append(Fault(i, ROLE_ORDER, "two observations in a row", _text(content)))
            continue
        if not isinstance(content, str):
            faults.append(Fault(i, ROLE_ORDER, "assistant content is not text", _text(content)))
            continue
        if i > 2 and roles[i - 1] == "assistant" and not _ends_complete(last_turn):
            faults.append(Fault(i, MISSING_OBSERVATION, "no observation before this turn", content))
        if last_turn is not None and last_turn.action == "search_complete" and merged_at is None:
            merged_at = i
        t = known[i] if known is not None and i < len(known) else None
        if t is not None:  # one valid turn, its think the text's only think body
            turns = [t]
            slots.append(Slot(i, 0, t.think or "", t.forced))
        else:
            turns = parse_turns(content)
            forced = len(turns) == 1 and turns[0].forced
            slots.extend(
                Slot(i, j, body, forced) for j, body in enumerate(split_thinks(content).thinks)
            )
        if len(turns) != 1:
            faults.append(Fault(i, TURNS_PER_MESSAGE, f"{len(turns)} turns", content))
        for t in turns:
            if not t.valid:
                faults.append(Fault(i, f"{INVALID_TURN}: {t.error}", t.error or "", content))
            elif t.sep == "" and not t.forced:
                faults.append(
                    Fault(i, NO_SEPARATOR, "nothing between </think> and the action", content)
                )
            forced_turns += t.forced
            if t.action == "search" and t.arg:
                queries.append(normalize_query(t.arg))
        if turns:
            last_turn = turns[-1]
    if merged_at is not None:
        faults.append(
            Fault(
                merged_at,
                MERGED_TRAJECTORIES,
                "turns after a search_complete",
                _text(messages[merged_at].get("content")),
            )
        )
    if not (roles and roles[-1] == "assistant" and _ends_complete(last_turn)):
        faults.append(
            Fault(len(messages) - 1, NO_FINAL_COMPLETE, "the last turn is not search_complete", "")
        )

    forced_end = None
    if roles and roles[-1] == "assistant" and last_turn is not None and last_turn.forced:
        forced_end = "exact" if last_turn.body() == FORCED_COMPLETION else "paraphrase"
    seen: dict[str, int] = {}
    for q in queries:
        seen[q] = seen.get(q, 0) + 1
    repeated = tuple(q for q, n in seen.items() if n > 1)
    tagged = tuple(s for s in slots if holds_action_tag(s.text))
    return Findings(
        forced_end,
        forced_turns,
        system_errors,
        repeated,
        tagged,
        tuple(faults),
        ddai_errors,
        tuple(slots),
    )


def _ddai_error(m: Message) -> bool:
    """DDAI's system-error count: a user message whose text holds ``[System Error:``."""
    c = m.get("content")
    return m.get("role") == "user" and isinstance(c, str) and "[System Error:" in c


def _ends_complete(turn) -> bool:
    return turn is not None and turn.action == "search_complete"


def _text(content: object) -> str:
    return content if isinstance(content, str) else repr(content)
