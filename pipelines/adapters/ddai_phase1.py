"""DDAI's legacy ``gspo_phase1.json`` (``--input-format ddai-phase1``).

One JSON document, rewritten whole on every call: step key → prompt uuid → ``{prompt, agents}``.
The step key is ``"step_"`` + the printed step tensor (``step_tensor([57, 57, 57, 57])`` → 57).
Each agent is a rollout (DESIGN.md): ``agent_id − 1`` → ``rollout_idx``, ``ndcg_value`` → ``ndcg``,
``⭐️final_score⭐️`` → ``reward``, ``ndcg_details`` → ``retrieved_pages`` / ``reference_pages``,
and the dataset id ``train_N`` recovered from the prompt's first reference document ``N_page``
(a prompt without one keeps its uuid as ``uid``, counted in the notes). ``format_ok`` is DDAI's
format check (``raw_score > 0``). ``response`` is the whole episode, so observations are cut out
of it (``transcript``) and the turns parsed from what is left. The prompt uuid, the raw scores and
the prompt text stay in ``extra``.

The document is read whole (it is one JSON value); a file that does not parse (caught mid-rewrite)
is one quarantined unit. Quarantine ``line`` numbers count units (agents) in document order.
Without ``--run-id`` the run id is the file stem.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters.base import (
    SURROGATE_DETAIL,
    SURROGATE_ESCAPE,
    UTF8_BOM,
    ReaderContext,
    SourceRecord,
    contained,
    lone_surrogate,
)
from ddai.pipelines.adapters.ddai_common import (
    dataset_id_of,
    file_name_of,
    question_from_prompt,
    run_id_from_stem,
)
from ddai.pipelines.adapters.peek import head_text
from ddai.pipelines.adapters.transcript import split_transcript

NAME = "ddai-phase1"
FINAL_KEYS = ("⭐️final_score⭐️", "final_score")
_SNIFF_RE = re.compile(r'^\s*\{\s*"step_')
_INT_RE = re.compile(r"-?\d+")


def sniff(path: Path) -> bool:
    return bool(_SNIFF_RE.match(head_text(path, 256)))


def step_of(key: str) -> int | None:
    """``step_tensor([57, 57, 57, 57])`` → 57, ``step_12`` → 12; None when the numbers differ."""
    nums = {int(n) for n in _INT_RE.findall(key)}
    return nums.pop() if len(nums) == 1 else None


def agent_rollout(
    agent: dict[str, Any], *, step: int | None, uid: str, prompt_uuid: str, prompt: Any
) -> dict[str, Any]:
    """One agent of one prompt as a loose rollout record."""
    rest = dict(agent)
    scores = rest.pop("scores", None)
    scores = dict(scores) if isinstance(scores, dict) else {}
    details = scores.pop("ndcg_details", None)
    details = details if isinstance(details, dict) else {}
    agent_id = rest.pop("agent_id", None)
    reward = next((scores.pop(k) for k in FINAL_KEYS if k in scores), None)
    raw_score = scores.get("raw_score")
    if isinstance(raw_score, int | float) and not isinstance(raw_score, bool):
        format_ok: bool | None = raw_score > 0
    elif "fail_reason" in scores:
        format_ok = scores["fail_reason"] is None
    else:
        format_ok = None
    reference = details.get("reference_documents")
    tr = split_transcript(rest.pop("response", None))
    rec: dict[str, Any] = {
        "step": step,
        "uid": uid,
        "rollout_idx": agent_id - 1 if isinstance(agent_id, int) else agent_id,
        "question": question_from_prompt(prompt) if isinstance(prompt, str) else None,
        "file_name": file_name_of(reference),
        "reference_pages": reference,
        "retrieved_pages": details.get("retrieved_documents"),
        "response": tr.response,
        "turns": tr.turns,
        "ndcg": scores.pop("ndcg_value", None),
        "reward": reward,
        "format_ok": format_ok,
        "prompt_uuid": prompt_uuid,
        "prompt": prompt,
        "scores": scores,
    }
    for k, v in details.items():
        if k not in ("reference_documents", "retrieved_documents"):
            rec.setdefault(f"ndcg_details.{k}", v)
    for k, v in rest.items():
        rec.setdefault(k if k not in rec else f"source_{k}", v)
    return rec


def read(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord]:
    run = None if ctx.run_id else run_id_from_stem(path.stem)
    raw = path.read_bytes().removeprefix(UTF8_BOM)
    ctx.bytes_read += len(raw)
    notes: Counter = Counter()
    ctx.notes[str(path)] = notes
    try:
        doc = json.loads(raw)
    except RecursionError:
        text = raw.decode("utf-8", errors="replace")
        detail = "whole document: nesting deeper than the JSON parser allows"
        yield SourceRecord(None, 1, text, "too deeply nested", detail, run_id=run)
        return
    except ValueError as e:
        text = raw.decode("utf-8", errors="replace")
        yield SourceRecord(None, 1, text, "malformed JSON", f"whole document: {e}", run_id=run)
        return
    if not isinstance(doc, dict):
        yield SourceRecord(
            None, 1, None, "wrong type", "the document must be an object", run_id=run
        )
        return
    # Only a document holding a \uD800-\uDFFF escape can hold a lone surrogate (half an emoji):
    # then every agent is checked, and one that holds one is quarantined.
    surrogates = SURROGATE_ESCAPE.search(raw) is not None
    unit = 0
    for step_key, prompts in doc.items():
        step = step_of(step_key)
        if step is None:
            notes["step keys without one step number"] += 1
        if not isinstance(prompts, dict):
            unit += 1
            yield _bad(unit, {step_key: prompts}, "wrong type", "a step maps prompt uuids", run)
            continue
        for uuid, entry in prompts.items():
            agents = entry.get("agents") if isinstance(entry, dict) else None
            if not isinstance(agents, list):
                unit += 1
                yield _bad(
                    unit, {uuid: entry}, "wrong type", "a prompt needs a list of agents", run
                )
                continue
            uid = _prompt_uid(agents)
            if uid is None:
                notes["prompts without a reference document (uid = prompt uuid)"] += 1
            ids = {"step": step, "uid": uid or uuid, "prompt_uuid": uuid}
            for agent in agents:
                unit += 1
                if not isinstance(agent, dict):
                    yield _bad(unit, agent, "wrong type", "an agent must be an object", run)
                    continue
                if surrogates and lone_surrogate([step_key, uuid, entry.get("prompt"), agent]):
                    yield _bad(unit, agent, "lone surrogate", SURROGATE_DETAIL, run)
                    continue
                yield contained(unit, None, run, _record, agent, ids, entry, step_key, unit, run)
    notes["units"] = unit


def _record(
    agent: dict[str, Any],
    ids: dict[str, Any],
    entry: dict[str, Any],
    step_key: str,
    unit: int,
    run: str | None,
) -> SourceRecord:
    """``ids``: the step, uid and prompt uuid ``agent_rollout`` takes; ``entry``: the prompt's."""
    rec = agent_rollout(agent, prompt=entry.get("prompt"), **ids)
    rec["step_key"] = step_key
    if run is not None:
        rec["run_id"] = run
    return SourceRecord(rec, unit, None, run_id=run)


def _prompt_uid(agents: list[Any]) -> str | None:
    """DDAI's recovery: the dataset id from the first agent's reference documents that name one."""
    for agent in agents:
        scores = agent.get("scores") if isinstance(agent, dict) else None
        details = scores.get("ndcg_details") if isinstance(scores, dict) else None
        if isinstance(details, dict):
            uid = dataset_id_of(details.get("reference_documents"))
            if uid is not None:
                return uid
    return None


def _bad(unit: int, obj: Any, reason: str, detail: str, run: str | None) -> SourceRecord:
    text = json.dumps(obj, ensure_ascii=False, default=str)
    if lone_surrogate(obj):  # not writable as UTF-8 text: keep it \u-escaped
        text = json.dumps(obj, default=str)
    return SourceRecord(None, unit, text, reason, detail, run_id=run)
