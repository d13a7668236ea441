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
from ddai.pipelines.records.tags import (
    FORCED_COMPLETION,
    Turn,
    holds_action_tag,
    known_forced,
    parse_turns,
)

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
    # the pattern needs '[System Error': a text without it is told without the regex
    return (
        isinstance(content, str)
        and "[System Error" in content
        and SYSTEM_ERROR_RE.match(content) is not None
    )


def normalize_query(q: str) -> str:
    return " ".join(q.split()).casefold()


# A record-built turn's fields (think, action, arg, sep), as ``rebuild`` hands them over.
Fields = tuple[str | None, str, str | None, str | None]


def inspect(
    messages: Sequence[Message], known: Sequence[Turn | Fields | None] | None = None
) -> Findings:
    """What ``messages`` hold. ``known``: per message, what the caller knows its text parses
    into (``rebuild.Rebuilt.turns``): the one valid turn, or the fields the text was written
    from (``tags.turn_text``), told without the parser where ``tags.known_forced`` can; None
    (or a None entry): parse it."""
    faults: list[Fault] = []
    roles = [m.get("role") for m in messages]
    if roles[:2] != ["system", "user"]:
        faults.append(Fault(0, ROLE_ORDER, f"starts with {roles[:2]}, not system, user", ""))

    forced_turns = system_errors = 0
    queries: list[str] = []
    # the last turn read: its action, whether forced, and its text (a Turn: its body())
    last_action: str | None = None
    last_forced = False
    last_body: Turn | str | None = None
    merged_at: int | None = None
    # think bodies of assistant text misplaced among the first two messages (a role-order fault)
    slots = think_slots(messages[:2])
    ddai_errors = sum(_ddai_error(m) for m in messages[:2])
    n_known = len(known) if known is not None else 0
    for i in range(2, len(messages)):
        content = messages[i].get("content")
        role = roles[i]
        if role != "assistant":
            if isinstance(content, str) and "[System Error" in content:
                system_errors += SYSTEM_ERROR_RE.match(content) is not None
                ddai_errors += role == "user" and "[System Error:" in content
            if i > 2 and roles[i - 1] != "assistant":
                faults.append(Fault(i, ROLE_ORDER, "two observations in a row", _text(content)))
            continue
        if not isinstance(content, str):
            faults.append(Fault(i, ROLE_ORDER, "assistant content is not text", _text(content)))
            continue
        if i > 2 and roles[i - 1] == "assistant" and last_action != "search_complete":
            faults.append(Fault(i, MISSING_OBSERVATION, "no observation before this turn", content))
        if last_action == "search_complete" and merged_at is None:
            merged_at = i
        k = known[i] if i < n_known else None
        if type(k) is tuple:  # the fields the text was written from
            think, action, arg, sep = k
            forced = known_forced(think, action, arg, sep)
            if forced is not None:  # one valid turn: the text is its body, its think the one
                slots.append(Slot(i, 0, think, forced))
                if sep == "" and not forced:
                    faults.append(
                        Fault(i, NO_SEPARATOR, "nothing between </think> and the action", content)
                    )
                forced_turns += forced
                if action == "search" and arg:
                    queries.append(normalize_query(arg))
                last_action, last_forced, last_body = action, forced, content
                continue
            k = None
        if k is not None:  # one valid turn, its think the text's only think body
            turns = [k]
            slots.append(Slot(i, 0, k.think or "", k.forced))
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
            last = turns[-1]
            last_action, last_forced, last_body = last.action, last.forced, last
    if merged_at is not None:
        faults.append(
            Fault(
                merged_at,
                MERGED_TRAJECTORIES,
                "turns after a search_complete",
                _text(messages[merged_at].get("content")),
            )
        )
    ends_assistant = bool(roles) and roles[-1] == "assistant"
    if not (ends_assistant and last_action == "search_complete"):
        faults.append(
            Fault(len(messages) - 1, NO_FINAL_COMPLETE, "the last turn is not search_complete", "")
        )

    forced_end = None
    if ends_assistant and last_body is not None and last_forced:
        body = last_body if isinstance(last_body, str) else last_body.body()
        forced_end = "exact" if body == FORCED_COMPLETION else "paraphrase"
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


def _text(content: object) -> str:
    return content if isinstance(content, str) else repr(content)
