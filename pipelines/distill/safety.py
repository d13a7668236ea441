"""The safety post-pass: it always runs, rewrite or not, on message lists of any train1 file.

Per sample, in order:

1. everything outside the thinks stays byte-identical to the original (``reconcile``: a message
   whose skeleton changed is restored; a changed message count or role order restores the whole
   sample);
2. a rewritten think holding think- or action-tag text is rolled back to its original;
3. a rewritten think adding an observation claim the original lacked is rolled back;
4. a sample whose *original* think holds action-tag text is dropped;

then the optional drops (forced max-turn completions, system-error observations, more system-error
observations than a cap, repeated search queries). A sample is dropped for the first reason that applies, so drops add up to the rows
removed. Grammar faults are reported, never dropped. Every decision is an ``Event``: counted by
rule in the manifest and written, with its before/after text, to the report.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ddai.pipelines.distill import findings as fnd
from ddai.pipelines.distill import rules
from ddai.pipelines.distill.configs import Drops
from ddai.pipelines.distill.thinks import Message, Slot, split_thinks, think_slots, with_thinks

# Optional drop reasons.
FORCED_COMPLETION = "forced-completion"
SYSTEM_ERROR = "system-error"
TOO_MANY_SYSTEM_ERRORS = "too-many-system-errors"
REPEATED_QUERY = "repeated-query"


@dataclass(frozen=True)
class Event:
    """One decision about one sample.

    ``action``: ``rollback`` (a think or message restored), ``drop`` (sample removed), ``discard``
    (the sample's whole rewrite thrown away) or ``fault`` (reported only). ``before``/``after``:
    the text before and after the rewrite (for a drop or fault: the offending original text).
    """

    uid: str
    action: str
    rule: str
    message: int | None = None
    think: int | None = None
    before: str | None = None
    after: str | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # every field is a str, an int or None: a shallow read (``asdict`` deep-copies)
        return {k: v for k in _EVENT_FIELDS if (v := getattr(self, k)) is not None}


_EVENT_FIELDS = tuple(f.name for f in fields(Event))


@dataclass
class Candidate:
    """A sample entering the post-pass.

    ``messages`` is the original (pre-rewrite) trajectory; ``thinks`` the proposed think bodies,
    one per ``think_slots(messages)`` entry (None: no rewrite); ``raw`` the messages JSON as read,
    written back unchanged when nothing changed; ``events`` decisions made before the post-pass
    (a discarded rewrite, a restored skeleton).
    """

    uid: str
    messages: list[Message]
    thinks: list[str] | None = None
    raw: str | None = None
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class Sample:
    """A sample leaving the post-pass: its final messages (and ``raw`` when unchanged)."""

    uid: str
    messages: list[Message]
    raw: str | None = None


@dataclass
class PostPassResult:
    """``dropped``: samples removed, by their first reason; ``fault_rows``: samples with a
    grammar fault, by kind; ``findings``: samples holding what the optional drops look for;
    ``rollbacks``, ``discards``: those events by rule."""

    samples: list[Sample]
    events: list[Event]
    rows_in: int
    dropped: dict[str, int]
    fault_rows: dict[str, int]
    findings: dict[str, int]
    rollbacks: dict[str, int]
    discards: dict[str, int]


def drop_reason(uid: str, f: fnd.Findings, drops: Drops) -> list[Event]:
    """The events that drop a sample (empty: keep it); the first one is the counted reason."""
    if f.tagged_thinks:
        return [
            Event(uid, "drop", rules.ACTION_TAG_IN_ORIGINAL, s.message, s.index, before=s.text)
            for s in f.tagged_thinks
        ]
    if drops.forced and f.forced_turns:
        return [Event(uid, "drop", FORCED_COMPLETION, detail=f.forced_end or "mid-trajectory")]
    if drops.system_errors and f.system_errors:
        return [Event(uid, "drop", SYSTEM_ERROR, detail=f"{f.system_errors} observation(s)")]
    cap = drops.max_system_errors
    if cap is not None and f.error_observations > cap:
        detail = f"{f.error_observations} system-error observation(s), more than {cap}"
        return [Event(uid, "drop", TOO_MANY_SYSTEM_ERRORS, detail=detail)]
    if drops.repeated_queries and f.repeated_queries:
        return [Event(uid, "drop", REPEATED_QUERY, detail="; ".join(f.repeated_queries))]
    return []


def review_thinks(
    uid: str,
    messages: Sequence[Message],
    proposed: Sequence[str],
    claims: rules.ClaimRules,
    slots: Sequence[Slot] | None = None,
) -> tuple[list[Message], list[Event]]:
    """Apply rules 2 and 3 think by think; returns the messages with the accepted thinks.
    ``slots``: ``think_slots(messages)`` when already known."""
    slots = think_slots(messages) if slots is None else slots
    if len(proposed) != len(slots):
        raise ValueError(f"{uid}: {len(proposed)} proposed thinks for {len(slots)} think bodies")
    kept, events = [], []
    for s, new in zip(slots, proposed, strict=True):
        rule = rules.think_violation(s.text, new, claims)
        if rule is None:
            kept.append(new)
            continue
        kept.append(s.text)
        detail = (
            ", ".join(claims.added(s.text, new)) if rule == rules.NEW_OBSERVATION_CLAIM else None
        )
        events.append(Event(uid, "rollback", rule, s.message, s.index, s.text, new, detail))
    return with_thinks(messages, slots, kept), events


def reconcile(uid: str, original: Sequence[Message], rewritten: Sequence[Message]) -> Candidate:
    """Rule 1 for a rewrite made elsewhere: a candidate whose proposed thinks come from
    ``rewritten`` wherever its skeleton matches ``original``, the original thinks elsewhere."""
    cand = Candidate(uid, [dict(m) for m in original])
    if [m.get("role") for m in original] != [m.get("role") for m in rewritten]:
        cand.events.append(
            Event(
                uid,
                "discard",
                rules.STRUCTURE_CHANGED,
                detail=f"{len(rewritten)} messages for {len(original)}, or roles differ",
            )
        )
        return cand
    proposed: list[str] = []
    for i, (o, w) in enumerate(zip(original, rewritten, strict=True)):
        if not (isinstance(o.get("content"), str) and o.get("role") == "assistant"):
            if w != o:
                cand.events.append(
                    Event(uid, "rollback", rules.OUTSIDE_THINK_CHANGED, i, None, _s(o), _s(w))
                )
            continue
        so = split_thinks(o["content"])
        wc = w.get("content")
        sw = split_thinks(wc) if isinstance(wc, str) else None
        if sw is None or sw.skeleton != so.skeleton or w.keys() != o.keys():
            cand.events.append(
                Event(uid, "rollback", rules.OUTSIDE_THINK_CHANGED, i, None, o["content"], _s(wc))
            )
            proposed.extend(so.thinks)
        else:
            proposed.extend(sw.thinks)
    cand.thinks = proposed
    return cand


class PostPass:
    """The post-pass one candidate at a time, with its counts (see the module docstring for the
    order of rules): ``one`` decides a candidate, ``result`` sums them up. A caller that streams
    candidates keeps their samples and events only as long as it needs them."""

    def __init__(self, claims: rules.ClaimRules | None = None, drops: Drops = Drops()) -> None:
        self.claims = claims or rules.ClaimRules()
        self.drops = drops
        self.rows_in = 0
        self.found: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.fault_rows: Counter[str] = Counter()
        self.actions: Counter[tuple[str, str]] = Counter()  # (action, rule) of every event

    def one(self, c: Candidate, f: fnd.Findings | None = None) -> tuple[Sample | None, list[Event]]:
        """``c``'s sample (None: dropped) and the events deciding it; ``f``: its findings when
        already known (``fnd.inspect(c.messages)``), so they are computed once per candidate."""
        self.rows_in += 1
        events = list(c.events)
        f = f if f is not None else fnd.inspect(c.messages)
        tally(self.found, f)
        if f.faults:
            events.extend(
                Event(c.uid, "fault", x.kind, x.message, None, x.text, detail=x.detail)
                for x in f.faults
            )
            self.fault_rows.update({x.kind for x in f.faults})
        sample = None
        if dropped := drop_reason(c.uid, f, self.drops):
            events.extend(dropped)
            self.dropped[dropped[0].rule] += 1
        else:
            messages = c.messages
            if c.thinks is not None:
                messages, rolled = review_thinks(
                    c.uid, c.messages, c.thinks, self.claims, f.slots or None
                )
                events.extend(rolled)
            # Keep the text as read when it still encodes the final messages: unchanged rows
            # keep their bytes.
            raw = c.raw if c.raw is not None and json.loads(c.raw) == messages else None
            sample = Sample(c.uid, messages, raw)
        if events:
            self.actions.update((e.action, e.rule) for e in events)
        return sample, events

    def counts(self, action: str) -> dict[str, int]:
        return _sorted(Counter({r: n for (a, r), n in self.actions.items() if a == action}))

    def result(self, samples: list[Sample], events: list[Event]) -> PostPassResult:
        return PostPassResult(
            samples,
            events,
            self.rows_in,
            _sorted(self.dropped),
            _sorted(self.fault_rows),
            dict(self.found),
            self.counts("rollback"),
            self.counts("discard"),
        )


def post_pass(
    candidates: Iterable[Candidate],
    *,
    claims: rules.ClaimRules | None = None,
    drops: Drops = Drops(),
) -> PostPassResult:
    """Run the post-pass over candidates (see the module docstring for the order of rules)."""
    pp = PostPass(claims, drops)
    out: list[Sample] = []
    events: list[Event] = []
    for c in candidates:
        sample, evs = pp.one(c)
        events.extend(evs)
        if sample is not None:
            out.append(sample)
    return pp.result(out, events)


REPEATED_QUERY_ROWS = "rows repeating a search query"
# The findings a row ending in a paraphrased forced completion (its only one) counts.
FORCED_PARAPHRASE_ROWS = (
    "rows ending in a forced completion",
    "rows ending in a paraphrased forced completion",
    "rows holding a forced completion",
)
# A trajectory holding nothing the post-pass counts (what ``sqlrows`` rows hold).
NO_FINDINGS = fnd.Findings(None, 0, 0, (), (), ())


def tally(found: Counter[str], f: fnd.Findings) -> None:
    found["rows ending in a forced completion"] += f.forced_end is not None
    found["rows ending in the exact forced completion"] += f.forced_end == "exact"
    found["rows ending in a paraphrased forced completion"] += f.forced_end == "paraphrase"
    found["rows holding a forced completion"] += f.forced_turns > 0
    found["rows with a system-error observation"] += f.system_errors > 0
    found[REPEATED_QUERY_ROWS] += bool(f.repeated_queries)
    found["rows with action-tag text in a think"] += bool(f.tagged_thinks)


def report_lines(events: Iterable[Event]) -> Iterable[str]:
    """The report: one JSON object per event."""
    for e in events:
        yield json.dumps(e.to_dict(), ensure_ascii=False) + "\n"


def _sorted(c: Counter[str]) -> dict[str, int]:
    return dict(sorted(c.items()))


def _s(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
