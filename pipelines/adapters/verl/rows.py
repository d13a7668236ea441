"""verl dump lines read one by one: the per-row mapping (the package's docstring gives it) the
columnar reader (``columns``) is held to, and the path it falls back to (the package's docstring
says where)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from ddai.pipelines.adapters.base import ReaderContext, SourceRecord, contained, no_object
from ddai.pipelines.adapters.ddai_common import question_from_prompt
from ddai.pipelines.adapters.transcript import split_transcript
from ddai.pipelines.adapters.verl.ids import UID_UNMATCHED, uid_of
from ddai.pipelines.records.schema import COLUMNS

PASSTHROUGH = ("judge_score", "ndcg", "data_source")
_OWN = ("input", "output", "gts", "score", "step")


def verl_rollout(obj: dict[str, Any], rollout_idx: int) -> dict[str, Any]:
    """One dump line as a loose rollout record (``obj["input"]`` must be a string, ``output`` a
    string or null)."""
    prompt, output = obj["input"], obj.get("output")
    tr = split_transcript(output if isinstance(output, str) else None)
    gts = obj.get("gts")
    rec: dict[str, Any] = {
        "uid": uid_of(prompt),
        "rollout_idx": rollout_idx,
        "step": obj.get("step"),
        "question": question_from_prompt(prompt),
        "reference_answer": gts
        if gts is None or isinstance(gts, str)
        else json.dumps(gts, ensure_ascii=False),
        "response": tr.response,
        "turns": tr.turns,
        "reward": obj.get("score"),
        "input": prompt,
    }
    if tr.observations or not isinstance(output, str):
        rec["output"] = output
    for k, v in obj.items():
        if k in _OWN:
            continue
        if k in PASSTHROUGH or k not in COLUMNS:
            rec[k] = v
        else:  # a reward extra named like a column would be read as one: keep it as extra
            rec[f"source_{k}"] = v
    return rec


def records(
    parsed: Iterable[tuple[int, str | None, Any, str | None]],
    run: str | None,
    ctx: ReaderContext,
    order: Counter,
) -> Iterator[SourceRecord]:
    for line, text, obj, reason in parsed:
        if (bad := no_object(line, text, obj, reason, run)) is not None:
            yield bad
        elif not isinstance(obj.get("input"), str):
            detail = "a line must be an object with a string input"
            yield SourceRecord(None, line, text, "wrong type", detail, run_id=run)
        elif (out := obj.get("output")) is not None and not isinstance(out, str):
            # the decoded response: anything else would be stored as an empty, turnless rollout
            detail = f"output must be a string (the decoded response), not {type(out).__name__}"
            yield SourceRecord(None, line, text, "wrong type", detail, run_id=run)
        else:
            yield contained(line, text, run, _record, obj, line, text, run, ctx, order)


def _record(
    obj: dict[str, Any],
    line: int,
    text: str | None,
    run: str | None,
    ctx: ReaderContext,
    order: Counter,
) -> SourceRecord:
    step = obj.get("step")
    uid, flags = uid_of(obj["input"]), None
    if ctx.uid_mapper is not None:
        mapped = ctx.uid_mapper.uid(obj)
        uid, flags = (mapped, None) if mapped is not None else (uid, [UID_UNMATCHED])
    group = (step if isinstance(step, int | str | None) else repr(step), uid)
    rec = verl_rollout(obj, order[group])
    rec["uid"] = uid
    if flags:
        rec["flags"] = flags
    order[group] += 1
    if run is not None:
        rec["run_id"] = run
    return SourceRecord(rec, line, text, run_id=run)
