"""DDAI's train1 export, re-expressed (not copied) for the distill bench: one rollout's events to
the chat messages ``scripts/extract_trajectories.py --export-train1-parquet`` writes.

DDAI builds an SFT sample from the unified trajectory log's events of one (uid, sample_idx),
ordered by their ``ts`` (then by their line in the log):

- the reward event (``rm.flash.detail`` or ``rm.phase1.detail``) gives the question: its
  ``query`` cut before the first ``\\n assistant`` line; no question, no sample;
- the messages open with the system prompt (``SYSTEM_PROMPT``) and the question as the user's;
- each ``model.plan`` is an assistant turn: its text without a trailing ``<|im_end|>``, stripped
  (empty texts are skipped). Its first action tag (``<search>``, ``<bbox>``,
  ``<search_complete>``, looked for after ``</think>`` first, else anywhere) must be well formed
  (a non-blank query; four numbers in ``[…]``; a closed ``search_complete``) and follow
  ``</think>`` with at most whitespace and one newline between: otherwise the whole rollout is
  dropped. A well-formed search or bbox leaves a tool output owed;
- ``tool.search.response`` pays an owed search: the first result image not yet shown in the
  rollout (else the top one), as a user message ``[{"image": path}]``; no results: dropped;
- ``tool.bbox.result`` pays an owed crop with its ``crop_path``; none: dropped;
- an output still owed when the next plan comes (or at the end) becomes a user message saying
  the tool failed (``SEARCH_ERROR``, ``BBOX_ERROR``);
- a rollout that never said ``<search_complete>true</search_complete>`` is dropped.

A kept sample is one row: ``uid`` (``{uid}__s{sample_idx}``, with ``__{last part of run_id}``
when the reward event names a run), ``format_version`` ``"v1"``, ``messages`` as compact JSON
text (non-ASCII kept).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

SYSTEM_PROMPT = (
    "You are a search agent.\n"
    "You must always begin with <think>...</think> showing your reasoning about the question.\n"
    "After reasoning, output exactly one action tag among <search>...</search> or "
    "<bbox>[x1, y1, x2, y2]</bbox> or <search_complete>true</search_complete>.\n"
    "Do not write anything before <think>. Keep actions on a new line after </think>.\n"
    "When using <search>, vary or refine the query using evidence from previous steps, "
    "and do not repeat the same query twice.\n"
)
SEARCH_ERROR = "[System Error: Search did not return an image. Please try a different query.]"
BBOX_ERROR = "[System Error: BBox crop failed. Please adjust the bbox or search again.]"
REWARD_EVENTS = ("rm.flash.detail", "rm.phase1.detail")
ACTIONS = ("<search>", "<bbox>", "<search_complete>")

_DONE = re.compile(r"<search_complete>\s*true\s*</search_complete>", re.I)
_ACTION_AFTER_THINK = re.compile(r"</think>\s*\n?\s*(<search>|<bbox>|<search_complete>)", re.I)
_TRAILING_END = re.compile(r"<\|im_end\|>\s*$")
_ASSISTANT_LINE = re.compile(r"\n\s*assistant\b", re.I)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.S | re.I)
_BBOX = re.compile(r"<bbox>\s*\[(.*?)\]\s*</bbox>", re.S | re.I)
_COMPLETE = re.compile(r"<search_complete>(.*?)</search_complete>", re.S | re.I)


def _ts(event: dict[str, Any]) -> float:
    """The event's time (``ts``, else ``timestamp``); 0 when missing or not a number."""
    raw = event.get("ts")
    if raw is None:
        raw = event.get("timestamp")
    try:
        return float(raw) if raw is not None else 0.0
    except (TypeError, ValueError):
        return 0.0


def events_by_rollout(lines: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every event with a uid and an integer ``sample_idx``, grouped by (uid, sample_idx), each
    group in (ts, line) order; each event is a copy carrying its line (``_line``), as DDAI's
    grouping makes one."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for line, event in enumerate(lines):
        uid, sample = event.get("uid"), event.get("sample_idx")
        if not uid or sample is None:
            continue
        try:
            sample = int(sample)
        except (TypeError, ValueError):
            continue
        groups[(uid, sample)].append({**event, "_line": line})
    for group in groups.values():
        group.sort(key=lambda e: (_ts(e), e["_line"]))
    return groups


def question_of(query: Any) -> str:
    """The question of a reward event's ``query``: what comes before an ``assistant`` line."""
    if not isinstance(query, str):
        return ""
    text = query.strip()
    cut = _ASSISTANT_LINE.search(text)
    return text[: cut.start()].strip() if cut else text


def _first_action(text: str) -> str | None:
    """The action tag that comes first after ``</think>`` (else anywhere in ``text``)."""
    low = text.lower()
    end = low.find("</think>")
    for scope in (low[end + len("</think>") :] if end != -1 else low, low):
        found = [(pos, tag) for tag in ACTIONS if (pos := scope.find(tag)) != -1]
        if found:
            return min(found)[1]
    return None


def _bbox_ok(text: str) -> bool:
    m = _BBOX.search(text)
    if m is None:
        return False
    parts = [p.strip() for p in m.group(1).split(",")]
    if len(parts) != 4:
        return False
    try:
        for p in parts:
            round(float(p))  # nan and inf fail here, as they do in DDAI's check
    except (ValueError, OverflowError):
        return False
    return True


def _action_ok(text: str, action: str | None) -> bool:
    """Whether the turn's first action is well formed."""
    if action == "<search>":
        m = _SEARCH.search(text)
        return bool(m and m.group(1).strip())
    if action == "<bbox>":
        return _bbox_ok(text)
    if action == "<search_complete>":
        return _COMPLETE.search(text) is not None
    return False


def messages_of(events: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The chat messages of one rollout's ``events`` (in log order), or ``None`` when DDAI's
    export drops it (no question, a malformed action, a tool output without its image, no
    ``search_complete`` true)."""
    reward = next((e for e in events if e.get("event_type") in REWARD_EVENTS), None)
    if reward is None:
        return None
    question = question_of(reward.get("query"))
    if not question:
        return None
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    shown: set[str] = set()
    owed = {"search": 0, "bbox": 0}
    done = False

    def pay_owed_with_errors() -> None:
        messages.extend({"role": "user", "content": SEARCH_ERROR} for _ in range(owed["search"]))
        messages.extend({"role": "user", "content": BBOX_ERROR} for _ in range(owed["bbox"]))
        owed["search"] = owed["bbox"] = 0

    for e in events:
        kind = e.get("event_type")
        if kind == "model.plan":
            pay_owed_with_errors()
            raw = e.get("text")
            text = _TRAILING_END.sub("", raw).strip() if isinstance(raw, str) else ""
            if not text:
                continue
            action = _first_action(text)
            if not _ACTION_AFTER_THINK.search(text) or not _action_ok(text, action):
                return None
            if action == "<search>":
                owed["search"] += 1
            elif action == "<bbox>":
                owed["bbox"] += 1
            done = done or _DONE.search(text) is not None
            messages.append({"role": "assistant", "content": text})
        elif kind == "tool.search.response" and owed["search"] > 0:
            results = e.get("results")
            if not isinstance(results, list) or not results:
                return None
            image = next(
                (
                    f
                    for r in results
                    if isinstance(r, dict)
                    and isinstance(f := r.get("image_file"), str)
                    and f
                    and f not in shown
                ),
                None,
            )
            if image is None:
                top = results[0].get("image_file") if isinstance(results[0], dict) else None
                image = top if isinstance(top, str) and top else None
            if image is None:
                return None
            shown.add(image)
            messages.append({"role": "user", "content": [{"image": image}]})
            owed["search"] -= 1
        elif kind == "tool.bbox.result" and owed["bbox"] > 0:
            crop = e.get("crop_path")
            if not isinstance(crop, str) or not crop:
                return None
            messages.append({"role": "user", "content": [{"image": crop}]})
            owed["bbox"] -= 1
    pay_owed_with_errors()
    return messages if done else None


def train1_row(uid: str, sample_idx: int, events: list[dict[str, Any]]) -> dict[str, str] | None:
    """The train1-shaped row of one rollout (``uid``, ``format_version``, ``messages`` as JSON
    text), or ``None`` when its messages are dropped."""
    messages = messages_of(events)
    if not messages:
        return None
    reward = next((e for e in events if e.get("event_type") in REWARD_EVENTS), {})
    run_id = reward.get("run_id") or ""
    out_uid = f"{uid}__s{sample_idx}"
    if isinstance(run_id, str) and run_id:
        out_uid += f"__{run_id.split('_')[-1]}"
    return {
        "uid": out_uid,
        "format_version": "v1",
        "messages": json.dumps(messages, ensure_ascii=False, separators=(",", ":")),
    }
