"""verl rollout dumps (``trainer.rollout_data_dir/{step}.jsonl``, ``--format verl``).

verl's ``_dump_generations`` writes one line per rollout: ``input`` (the decoded prompt),
``output`` (the decoded response: the whole episode, observations included), ``gts`` (in newer
verl), ``score``, ``step`` and the reward function's extra fields. The dump carries no group id,
so (DESIGN.md) ``uid`` = the first 12 hex digits of sha1(``input``) and ``rollout_idx`` = the
rollout's order among the file's rows of the same (``step``, ``uid``). ``output`` is split into
the policy's text (``response``) and observations as far as the tags allow (``transcript``);
when observations were cut, the raw ``output`` stays in ``extra``. ``score`` → ``reward``,
``gts`` → ``reference_answer``, the question from the prompt's last user message; the reward
extras ``judge_score``, ``ndcg`` and ``data_source`` map to their columns, every other field goes
to ``extra``. Without ``--run-id`` the run id is the dump folder's name (the file stem when it is
not a step number).

With ``ctx.uid_mapper`` (``ddai ingest --uid-field`` / ``--dataset``, ``verl_ids``) ``uid`` is the
dataset id instead, so the run joins the dataset in the funnel; a row it cannot map keeps the sha1
uid and the flag ``uid_unmatched``. ``rollout_idx`` is the order within (``step``, final ``uid``).

``ddai ingest`` reads clean batches of lines in columns (``verl_columns``: the same rows, counts
and quarantine as this module's per-row path, which reads every other batch).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters import verl_columns
from ddai.pipelines.adapters.base import (
    ReaderContext,
    RowBatch,
    SourceRecord,
    contained,
    iter_json_lines,
    open_lines,
)
from ddai.pipelines.adapters.ddai_common import question_from_prompt, run_id_from_stem
from ddai.pipelines.adapters.line_batches import iter_batches
from ddai.pipelines.adapters.peek import first_object
from ddai.pipelines.adapters.transcript import split_transcript
from ddai.pipelines.adapters.verl_ids import UID_UNMATCHED, uid_of
from ddai.pipelines.records.schema import COLUMNS

NAME = "verl"
PASSTHROUGH = ("judge_score", "ndcg", "data_source")
_OWN = ("input", "output", "gts", "score", "step")


def sniff(path: Path) -> bool:
    obj = first_object(path)
    return (
        obj is not None
        and "event_type" not in obj
        and isinstance(obj.get("input"), str)
        and isinstance(obj.get("output"), str)
    )


def run_id_for(path: Path) -> str:
    return run_id_from_stem(path.parent.name if path.stem.isdigit() else path.stem)


def verl_rollout(obj: dict[str, Any], rollout_idx: int) -> dict[str, Any]:
    """One dump line as a loose rollout record (``obj["input"]`` must be a string)."""
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


def _records(
    parsed: Iterable[tuple[int, str | None, Any, str | None]],
    run: str | None,
    ctx: ReaderContext,
    order: Counter,
) -> Iterator[SourceRecord]:
    for line, text, obj, reason in parsed:
        if reason is not None:
            key, _, detail = reason.partition("|")
            yield SourceRecord(None, line, text, key, detail, run_id=run)
        elif not isinstance(obj, dict) or not isinstance(obj.get("input"), str):
            detail = "a line must be an object with a string input"
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


def read(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    run = None if ctx.run_id else run_id_for(path)
    order: Counter = Counter()
    with open_lines(path) as fh:
        if not ctx.columnar:
            yield from _records(iter_json_lines(fh, ctx), run, ctx, order)
        else:
            # Whole batches in columns where the batch is clean; any other batch line by line.
            for batch in iter_batches(fh, ctx):
                got = None
                if batch.clean:
                    try:
                        got = verl_columns.to_rows(batch, ctx.run_id or run, order, ctx.uid_mapper)
                    except Exception:  # a fault of the columnar path: the per-row path contains it
                        got = None
                if got is not None:
                    yield got
                else:
                    yield from _records(batch.records(), run, ctx, order)
    ctx.notes[str(path)] = {
        "groups (step, uid)": len(order),
        "rows": sum(order.values()),
        **(dict(sorted(ctx.uid_mapper.counts.items())) if ctx.uid_mapper is not None else {}),
    }
    if ctx.uid_mapper is not None:
        ctx.uid_mapper.counts.clear()  # per file
