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

With ``ctx.uid_mapper`` (``ddai ingest --uid-field`` / ``--dataset``, ``ids``) ``uid`` is the
dataset id instead, so the run joins the dataset in the funnel; a row it cannot map keeps the sha1
uid and the flag ``uid_unmatched``. ``rollout_idx`` is the order within (``step``, final ``uid``).

The reader reads byte batches of whole lines in columns (``columns``, transcripts cut by
``transcripts``); it reads row by row (``rows``, the same rows, counts and quarantine) only where
columns cannot give the per-row result: the batches ``line_batches.read_lines`` reads by lines
(not clean, or every one with ``ReaderContext.columnar`` false) and a clean batch ``columns``
declines (its docstring lists when) or whose columnar read fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ddai.pipelines.adapters.base import ReaderContext, RowBatch, SourceRecord, open_lines
from ddai.pipelines.adapters.ddai_common import run_id_from_stem
from ddai.pipelines.adapters.line_batches import LineBatch, read_lines
from ddai.pipelines.adapters.peek import first_object
from ddai.pipelines.adapters.verl import columns, rows

NAME = "verl"


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


def read(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    run = None if ctx.run_id else run_id_for(path)
    order: Counter = Counter()  # (step, uid) -> rows seen: rollout_idx across both paths

    def in_columns(batch: LineBatch) -> list[RowBatch] | None:
        got = columns.to_rows(batch, ctx.run_id or run, order, ctx.uid_mapper)
        return None if got is None else [got]

    with open_lines(path) as fh:
        yield from read_lines(
            fh, ctx, in_columns, lambda parsed: rows.records(parsed, run, ctx, order)
        )
    ctx.notes[str(path)] = {
        "groups (step, uid)": len(order),
        "rows": sum(order.values()),
        **(dict(sorted(ctx.uid_mapper.counts.items())) if ctx.uid_mapper is not None else {}),
    }
    if ctx.uid_mapper is not None:
        ctx.uid_mapper.counts.clear()  # per file
