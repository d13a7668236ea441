"""DDAI's unified trajectory log read event by event: the assembler, the reference the
columnar reader (``columns``) is held to and the path it falls back to (the package's
docstring says where).

One event per line (``../shared/ddai-formats/README.md``). A rollout is the events sharing
(``run_id``, ``global_step``, ``sample_idx``): within one training step ``sample_idx`` is the
rollout's row in the generation batch, so the key never merges rollouts of different steps or runs
(DDAI's own extractor keyed on ``uid`` and ``sample_idx`` alone and did). ``uid`` must agree
across the events (the reward's may carry DDAI's ``-{prompt_idx}`` suffix for a prompt repeated in
one batch); a disagreement is a conflict, quarantined.

Assembly streams with memory bounded by the rollouts in flight:

- ``model.plan`` events are the turns, ordered by ``turn_idx``; empty texts are DDAI's padding for
  rollouts already finished and are ignored unless a later turn follows them.
- tool events belong to the turn of the rollout's latest plan read before them (DDAI logs a turn's
  tool calls right after its plan); one that does not fit there (out of order) goes to the first
  turn of its kind still without one. A search turn shows the first result not yet shown in the
  rollout, else the top one: ``retrieved`` = [its basename], ``observation`` = its path; a bbox
  turn's ``observation`` is the crop path.
- ``rm.flash.detail`` is the reward (DESIGN.md's mapping). A rollout is written as soon as its
  reward is in and its last turn ends it (``search_complete`` or DDAI's last-turn flag), in
  whichever order those arrive; otherwise when its step is ``HORIZON`` steps behind the newest of
  its run, or at the end of the file.
- Left incomplete: a rollout with a reward and a gap in ``turn_idx`` (DDAI's logger is
  best-effort: a lost ``model.plan``) is kept with its scores and the flag ``turns_incomplete``;
  ``extra.turns_missing`` lists the missing turn indexes, ``turns[].idx`` keeps the logged ones,
  ``num_turns`` counts up to the last logged turn and ``format_ok`` is null unless a logged turn
  fails the gate. A reward with no turns at all (it may be a late reward of a rollout already
  written) is quarantined as ``missing turns``; one with turns that end it but no reward is kept with null scores (counted in
  the notes: DDAI scores late or unsubmitted groups 0 without logging them); one with neither is
  quarantined as ``incomplete rollout``. A bad line or an event without ``sample_idx`` is
  quarantined on its own.
- ``run.start`` goes to the run's manifest (``run_config``: ``max_turns``, ``n_agent``, the whole
  ``config``; a ``run.start`` logged twice is counted as a duplicate event, not as a run more).
  Every other event type (batch-mode ``rm.batch.summary`` / ``rm.phase1.detail``, whose
  ``uid`` is a per-prompt uuid, ``frozen.response``, metrics, debug) is kept whole as a side table
  (its source line as it was logged).

Mapped fields: ``global_step`` → ``step``; ``rollout_idx`` = ``sample_idx mod n_agent`` (DDAI's
``local_idx`` of a full group; a partial submit numbers only the submitted rollouts, so a differing
``local_idx`` is kept in ``extra``); ``response`` = the plan texts joined in turn order;
``terminated`` from the turns and ``config.max_turns``; ``data_source`` from
``config.data.data_source`` when the run names one. ``extra`` holds the reward event's other fields,
``max_turns`` and ``search_results`` (per executed search, the result basenames).

Longer than 400 lines because the event grammar, the rollout key and the per-event repairs of
DDAI's unified log are one assembler; split, each half would need the other's state.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters.base import ReaderContext, SourceRecord, error_detail, no_object
from ddai.pipelines.adapters.ddai_common import (
    basename,
    executed_action,
    flash_rollout,
    turn_record,
)
from ddai.pipelines.adapters.side import keep_line
from ddai.pipelines.adapters.unified.events import (
    BBOX,
    CONTEXT_FIELDS,
    EXTRA_CONTEXT,
    HORIZON,
    NO_STEP,
    PLAN,
    REWARD,
    ROLLOUT_EVENTS,
    SEARCH_REQUEST,
    SEARCH_RESPONSE,
    Key,
    int_or_none,
    rollout_digest,
    rollout_raw,
    run_config,
    same_prompt,
)
from ddai.pipelines.records import tags
from ddai.pipelines.records.schema import TURNS_INCOMPLETE


@dataclass
class _Pending:
    """The events of one rollout read so far."""

    key: Key
    first_line: int
    plans: dict[int, tuple[dict[str, Any], int]] = field(default_factory=dict)  # idx → (ev, line)
    empty: set[int] = field(default_factory=set)
    tools: list[tuple[dict[str, Any], int, int | None]] = field(default_factory=list)
    reward: tuple[dict[str, Any], int] | None = None
    latest_turn: int | None = None
    conflict: str | None = None
    # every event line taken into the rollout (padding included), as (line, text without its
    # newline): the rollout's content digest, and what is carried to the next columnar batch
    raws: list[tuple[int, str]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        evs = [(ln, ev) for ev, ln in self.plans.values()]
        evs += [(ln, ev) for ev, ln, _ in self.tools]
        if self.reward:
            evs.append((self.reward[1], self.reward[0]))
        return [ev for _, ev in sorted(evs, key=lambda x: x[0])]

    def logged(self) -> list[int]:
        """Turn indices with a plan, or with padding before the last plan, in order."""
        last = max(self.plans)
        return sorted(set(self.plans) | {i for i in self.empty if i < last})

    def sequence(self) -> list[int] | None:
        """``logged``, or None when turn 0 is missing or there is a gap."""
        if not self.plans:
            return None
        seq = self.logged()
        return seq if seq == list(range(len(seq))) else None

    def missing(self) -> list[int]:
        """Turn indexes below the last logged plan that have neither a plan nor padding."""
        if not self.plans:
            return []
        return [i for i in range(max(self.plans)) if i not in self.plans and i not in self.empty]

    def ends(self) -> bool:
        """Whether the last turn read ends the rollout (search_complete or the last-turn flag)."""
        if not self.plans or self.sequence() is None:
            return False
        ev, _ = self.plans[max(self.plans)]
        if ev.get("is_last_turn") is True or ev.get("final_rollout") is True:
            return True
        return executed_action(ev.get("text"))[0] == "search_complete"


class Assembler:
    """Streams events in, rollouts (and quarantine units) out."""

    def __init__(self, path: Path, ctx: ReaderContext):
        self.path, self.ctx = path, ctx
        self.pending: dict[Key, _Pending] = {}
        self.newest_step: dict[Any, int] = {}
        self.max_turns: dict[Any, int | None] = {}
        self.data_source: dict[Any, str | None] = {}
        self.n: Counter = Counter()
        self.by_type: Counter = Counter()
        self.side: Counter = Counter()
        self.quarantined: Counter = Counter()

    # ------------------------------------------------------------------ events in
    def feed(self, ev: dict[str, Any], line: int, text: str) -> Iterator[SourceRecord]:
        et = ev.get("event_type")
        self.by_type[et if isinstance(et, str) else "(none)"] += 1
        run = ev.get("run_id")
        run = run if isinstance(run, str) else None
        if not isinstance(et, str):
            yield self.bad(line, text, run, "not an event", "no event_type")
            return
        if et == "run.start":
            self.run_start(ev)
            return
        if et not in ROLLOUT_EVENTS:
            keep_line(self.ctx.side_tables, et, text, ev, run)
            self.side[et] += 1
            return
        sample_idx, step = int_or_none(ev.get("sample_idx")), ev.get("global_step")
        if sample_idx is None or not (step is None or int_or_none(step) is not None):
            yield self.bad(
                line, text, run, "unjoinable event", f"{et} without integer sample_idx/global_step"
            )
            return
        if step is not None and step > self.newest_step.get(run, NO_STEP):
            yield from self._advance(run, step)
        if et == PLAN:
            yield from self._plan(ev, line, text, (run, step, sample_idx))
            return
        p = self._get((run, step, sample_idx), line)
        p.raws.append((line, text.rstrip("\r\n")))
        if et == REWARD:
            if p.reward is not None and _payload(p.reward[0]) != _payload(ev):
                p.conflict = "two different rm.flash.detail events"
            elif p.reward is not None:
                self.n["duplicate events ignored"] += 1
            else:
                p.reward = (ev, line)
        else:
            p.tools.append((ev, line, p.latest_turn))
        if p.reward is not None:
            yield from self._maybe_flush(p)

    def _plan(self, ev: dict[str, Any], line: int, text: str, key: Key) -> Iterator[SourceRecord]:
        turn = int_or_none(ev.get("turn_idx"))
        if turn is None:
            yield self.bad(line, text, key[0], "unjoinable event", "model.plan without turn_idx")
            return
        if not ev.get("text"):
            # DDAI logs an empty plan for every rollout no longer active: padding, unless a
            # later turn of a rollout still being read follows it.
            p = self.pending.get(key)
            if p is None:
                self.n["empty plans ignored"] += 1
            else:
                p.empty.add(turn)
                p.raws.append((line, text.rstrip("\r\n")))
            return
        p = self._get(key, line)
        p.raws.append((line, text.rstrip("\r\n")))
        if turn in p.plans:
            if p.plans[turn][0].get("text") != ev.get("text"):
                p.conflict = f"two different model.plan events for turn {turn}"
            else:
                self.n["duplicate events ignored"] += 1
        else:
            p.plans[turn] = (ev, line)
        p.latest_turn = turn
        if p.reward is not None:
            yield from self._maybe_flush(p)

    def run_start(self, ev: dict[str, Any]) -> None:
        run = ev.get("run_id")
        cfg, self.max_turns[run], self.data_source[run] = run_config(ev)
        entry = {
            "source_run_id": run,
            "experiment_name": ev.get("experiment_name"),
            "max_turns": self.max_turns[run],
            "n_agent": ev.get("n_agent"),
            "config": cfg,
        }
        target = self.ctx.run_id or (run if isinstance(run, str) else None)
        if target is None:
            return
        if target in self.ctx.run_config:  # several source runs under one --run-id
            first = self.ctx.run_config[target]
            seen = [
                {k: v for k, v in first.items() if k != "more_runs"},
                *first.get("more_runs", []),
            ]
            if entry in seen:  # the same line logged again: no run more
                self.n["duplicate events ignored"] += 1
                return
            first.setdefault("more_runs", []).append(entry)
        else:
            self.ctx.run_config[target] = entry
        self.n["runs started"] += 1

    # ------------------------------------------------------------------ bookkeeping
    def _get(self, key: Key, line: int) -> _Pending:
        p = self.pending.get(key)
        if p is None:
            p = self.pending[key] = _Pending(key, line)
        return p

    def _advance(self, run: Any, step: int) -> Iterator[SourceRecord]:
        """A newer step of ``run``: rollouts ``HORIZON`` steps behind can get no more events."""
        self.newest_step[run] = step
        old = [k for k in self.pending if k[0] == run and (k[1] is None or k[1] <= step - HORIZON)]
        for k in old:
            yield from self._finish(self.pending.pop(k))

    def _maybe_flush(self, p: _Pending) -> Iterator[SourceRecord]:
        if p.reward is not None and p.conflict is None and p.ends():
            del self.pending[p.key]
            yield from self._finish(p)

    def drain(self) -> Iterator[SourceRecord]:
        for k in list(self.pending):
            p = self.pending.pop(k)
            try:  # a fault in one rollout stays with that rollout, as in read_records
                out = list(self._finish(p))
            except Exception as e:
                run = k[0] if isinstance(k[0], str) else None
                raw = rollout_raw(k, p.events())
                out = [self.bad(p.first_line, raw, run, "unreadable row", error_detail(e))]
            yield from out

    def read_records(
        self, records: Iterable[tuple[int, str | None, Any, str | None]]
    ) -> Iterator[SourceRecord]:
        """Parsed lines (``(line, text, obj, reason)`` as ``iter_json_lines`` yields) in, rollouts
        and quarantine units out, event by event."""
        for line, text, obj, reason in records:
            if (bad := no_object(line, text, obj, reason)) is not None:
                self.quarantined[bad.reason] += 1
                yield bad
            else:
                try:  # a fault in one event stays with that event's line
                    out = list(self.feed(obj, line, text))
                except Exception as e:
                    out = [
                        self.bad(line, text, obj.get("run_id"), "unreadable row", error_detail(e))
                    ]
                yield from out

    # ------------------------------------------------------------------ columnar hand-over
    def restore(self, carry: list[tuple[int, str]]) -> None:
        """Take back the rollouts in flight from a columnar batch: their event lines, re-read in
        order without counting them again (they were counted when first read)."""
        saved = (self.n.copy(), self.by_type.copy(), self.side.copy(), self.quarantined.copy())
        for line, text in carry:
            out = list(self.feed(json.loads(text), line, text))
            assert not out, "a carried rollout cannot complete on its own events"
        self.n, self.by_type, self.side, self.quarantined = saved

    def in_flight_chars(self) -> int:
        """The text of the rollouts in flight, in characters (what a columnar batch would carry)."""
        return sum(len(t) for p in self.pending.values() for _, t in p.raws)

    def release(self) -> list[tuple[int, str]]:
        """Hand the rollouts in flight to the next columnar batch as their event lines."""
        carry = sorted(x for p in self.pending.values() for x in p.raws)
        self.pending.clear()
        return carry

    # ------------------------------------------------------------------ rollouts out
    def _finish(self, p: _Pending) -> Iterator[SourceRecord]:
        run = p.key[0] if isinstance(p.key[0], str) else None
        seq = p.sequence()
        reason = None
        if p.conflict:
            reason, detail = "conflicting events", p.conflict
        elif seq is None and p.reward is not None and p.plans:
            seq = p.logged()  # a lost plan event: the scores are whole, the text is not
        elif seq is None and p.reward is not None:
            got = sorted(p.plans)
            reason, detail = "missing turns", f"rm.flash.detail with model.plan turns {got}"
        elif seq is None or (p.reward is None and not p.ends()):
            reason = "incomplete rollout"
            detail = f"turns {sorted(p.plans)}, no rm.flash.detail" + (
                "" if p.plans else f", {len(p.tools)} tool events"
            )
        if reason is not None:
            self.quarantined[reason] += 1
            raw = rollout_raw(p.key, p.events())
            yield SourceRecord(None, p.first_line, raw, reason, detail, run_id=run)
            return
        row, leftovers = self._assemble(p, seq)
        missing = p.missing()
        if missing:
            row.update(flags=[TURNS_INCOMPLETE], turns_missing=missing, num_turns=max(p.plans) + 1)
            self.n["rollouts kept with missing turns"] += 1
        self.n["rollouts assembled"] += 1
        if p.reward is None:
            self.n["rollouts without a reward event"] += 1
        yield SourceRecord(
            row,
            p.reward[1] if p.reward else p.first_line,
            rollout_raw(p.key, [json.loads(t) for _, t in p.raws]),
            run_id=run,
            digest=rollout_digest(t for _, t in p.raws),
        )
        for ev, line in leftovers:
            self.quarantined["unmatched tool event"] += 1
            raw = json.dumps(ev, ensure_ascii=False, default=str)
            detail = f"{ev.get('event_type')} fits no turn of its rollout"
            yield SourceRecord(None, line, raw, "unmatched tool event", detail, run_id=run)

    def _assemble(
        self, p: _Pending, seq: list[int]
    ) -> tuple[dict[str, Any], list[tuple[dict, int]]]:
        run, step, sample_idx = p.key
        texts = [p.plans[i][0].get("text") if i in p.plans else "" for i in seq]
        parsed = []
        for idx, text in zip(seq, texts, strict=True):
            t = tags.parse_turn(text if isinstance(text, str) else "")
            t.idx = idx  # the logged turn index (== position unless turns are missing)
            parsed.append(t)
        turns = [turn_record(t) for t in parsed]
        actions = [executed_action(t if isinstance(t, str) else "") for t in texts]
        gappy = bool(p.missing())
        found, leftovers = _place_tools(p, seq, actions, fallback=not gappy)
        seen: set[str] = set()
        search_results: list[list[str]] = []
        for pos, (rec, (act, _)) in enumerate(zip(turns, actions, strict=True)):
            got = found.get(pos, {})
            if act == "search":
                resp = got.get(SEARCH_RESPONSE)
                if resp is None:
                    self.n["search turns without a response"] += 1
                    continue
                files = _result_files(resp)
                search_results.append([basename(f) for f in files])
                shown = next((f for f in files if f not in seen), files[0] if files else None)
                if shown is not None:
                    seen.add(shown)
                    rec["retrieved"] = [basename(shown)]
                    rec["observation"] = shown
                if resp.get("error") and rec["error"] is None:
                    rec["error"] = str(resp["error"])
            elif act == "bbox" and BBOX in got:
                rec["observation"] = got[BBOX].get("crop_path")

        plan_evs = [p.plans[i][0] for i in seq if i in p.plans]
        uids = {repr(ev.get("uid")) for ev in plan_evs}  # a uid may be any JSON value
        uid = plan_evs[0].get("uid") if plan_evs else None
        context = p.reward[0] if p.reward else plan_evs[-1]
        n_agent = int_or_none(context.get("n_agent"))
        rec: dict[str, Any] = {}
        if p.reward is not None:
            payload = {k: v for k, v in p.reward[0].items() if k not in CONTEXT_FIELDS}
            rec = flash_rollout(payload)
            reward_uid = rec.get("uid")
            if uid is not None and not same_prompt(uid, reward_uid, sample_idx, n_agent):
                rec["reward_uid"] = reward_uid
                self.n["reward uid differs from plan uid"] += 1
        if len(uids) > 1:
            self.n["plan uids differ within a rollout"] += 1
        rec["uid"] = uid if uid is not None else rec.get("uid")
        local_idx = rec.pop("rollout_idx", None)
        if n_agent:
            rec["rollout_idx"] = sample_idx % n_agent
            if local_idx is not None and local_idx != rec["rollout_idx"]:
                rec["local_idx"] = local_idx
                self.n["local_idx differs from sample_idx mod n_agent"] += 1
        else:
            rec["rollout_idx"] = local_idx
        for k in EXTRA_CONTEXT:
            if k in context:
                rec[k] = context[k]
        max_turns = self.max_turns.get(run)
        if max_turns is not None:
            rec["max_turns"] = max_turns
        rec["search_results"] = search_results
        if gappy and leftovers:
            # tool events of the lost turns: kept with the rollout, never moved to another turn
            rec["unplaced_tool_events"] = [
                {k: v for k, v in ev.items() if k not in CONTEXT_FIELDS or k == "event_type"}
                for ev, _ in leftovers
            ]
            leftovers = []
        rec.update(
            run_id=run,
            step=step,
            sample_idx=sample_idx,
            data_source=self.data_source.get(run),
            response="".join(t if isinstance(t, str) else "" for t in texts),
            turns=turns,
            terminated=tags.terminated_from(parsed, max_turns),
        )
        return rec, leftovers

    def bad(self, line: int, text: str, run: Any, reason: str, detail: str) -> SourceRecord:
        self.quarantined[reason] += 1
        return SourceRecord(
            None, line, text, reason, detail, run_id=run if isinstance(run, str) else None
        )

    def notes(self) -> dict[str, Any]:
        return {
            "events read": sum(self.by_type.values()),
            "events by type": dict(sorted(self.by_type.items())),
            "side-table rows": dict(sorted(self.side.items())),
            "quarantined units": dict(sorted(self.quarantined.items())),
            **{k: v for k, v in sorted(self.n.items())},
        }


def _place_tools(
    p: _Pending, seq: list[int], actions: list[tuple[str | None, str]], *, fallback: bool = True
) -> tuple[dict[int, dict[str, dict]], list[tuple[dict, int]]]:
    """Tool events per turn position: where the log put them, else (``fallback``) the first free
    turn of a kind.

    Requests carry only the turn's own query, so any number are accepted; a response or crop per
    executing turn at most. Without ``fallback`` (a rollout with lost turns, whose tool events may
    belong to them) an event that does not fit where the log put it is left over.
    """
    kind = {SEARCH_RESPONSE: "search", SEARCH_REQUEST: "search", BBOX: "bbox"}
    pos_of = {idx: pos for pos, idx in enumerate(seq)}
    found: dict[int, dict[str, dict]] = {}
    later: list[tuple[dict, int]] = []
    for ev, line, placed in p.tools:
        et = ev.get("event_type")
        if et == SEARCH_REQUEST:
            continue
        pos = pos_of.get(placed) if placed is not None else None
        if pos is not None and actions[pos][0] == kind[et] and et not in found.get(pos, {}):
            found.setdefault(pos, {})[et] = ev
        else:
            later.append((ev, line))
    if not fallback:
        return found, later
    leftovers = []
    for ev, line in sorted(later, key=lambda x: (_ts(x[0]), x[1])):
        et = ev["event_type"]
        free = [
            pos
            for pos, (act, arg) in enumerate(actions)
            if act == kind[et] and et not in found.get(pos, {}) and _fits(ev, arg)
        ]
        if free:
            found.setdefault(free[0], {})[et] = ev
        else:
            leftovers.append((ev, line))
    return found, leftovers


def _fits(ev: dict[str, Any], arg: str) -> bool:
    """A crop fits a bbox turn when its box is the turn's (validation crops are padded by 28)."""
    if ev.get("event_type") != BBOX:
        return True
    try:
        box = json.loads(arg)
    except ValueError:
        return False
    got = ev.get("bbox")
    if not isinstance(box, list) or not isinstance(got, list) or len(box) != 4 or len(got) != 4:
        return False
    pad = 28 if ev.get("is_validation") else 0
    want = [box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad]
    try:
        return all(abs(float(a) - float(b)) < 1e-9 for a, b in zip(got, want, strict=True))
    except (TypeError, ValueError):
        return False


def _result_files(resp: dict[str, Any]) -> list[str]:
    results = resp.get("results")
    if not isinstance(results, list):
        return []
    out = []
    for r in results:
        f = r.get("image_file") if isinstance(r, dict) else None
        if isinstance(f, str) and f:
            out.append(f)
    return out


def _payload(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ev.items() if k not in ("ts", "latency_s")}


def _ts(ev: dict[str, Any]) -> float:
    ts = ev.get("ts")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else 0.0
