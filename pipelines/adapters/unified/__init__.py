"""DDAI's unified trajectory log (``unified_trajectory.jsonl``, ``--input-format ddai-unified``):
the reader the registry uses.

One event per line (``../shared/ddai-formats/README.md``); a rollout is the events sharing
(``run_id``, ``global_step``, ``sample_idx``). How events become rollouts (the turns, the tool
events on them, the reward, what is kept incomplete or quarantined, the mapped fields) is
``assembler``'s docstring: the event-by-event assembler is the definition.

The reader reads in columns: byte batches of whole lines parsed by Arrow and joined by a polars
group-by (``columns``), completed rollouts built as rows (``rows``, rewards in ``rewards``, plan
texts cut by ``turns``), rollouts still in flight at a batch's end carried to the next as their
event lines. It reads event by event (``assembler.Assembler``) only where columns cannot give the
assembler's result:

- a batch that is not clean (``line_batches`` says when): each line is parsed, and quarantined,
  on its own;
- a clean batch ``columns`` declines (its docstring lists when: the assembler's per-event
  repairs and quarantine reasons);
- a batch smaller than twice the text in flight (mostly the file's last): re-parsing the carried
  lines would cost more than the batch; its rollouts stay in the assembler until a clean batch
  large enough takes them back;
- the whole file with ``ReaderContext.columnar`` false (``IngestConfig.columnar``): the reference
  the equality tests hold the columnar path to (``tests/support/columnar.py``).

"Rows in" for this format are the units yielded: rollouts assembled plus units quarantined. Event
counts are in ``ctx.notes[<path>]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ddai.pipelines.adapters import line_batches
from ddai.pipelines.adapters.base import (
    ReaderContext,
    RowBatch,
    SourceRecord,
    iter_json_lines,
    open_lines,
)
from ddai.pipelines.adapters.line_batches import iter_batches
from ddai.pipelines.adapters.peek import first_object
from ddai.pipelines.adapters.unified import columns
from ddai.pipelines.adapters.unified.assembler import Assembler

NAME = "ddai-unified"


def sniff(path: Path) -> bool:
    obj = first_object(path)
    return obj is not None and isinstance(obj.get("event_type"), str)


def read(path: Path, ctx: ReaderContext) -> Iterator[SourceRecord | RowBatch]:
    asm = Assembler(path, ctx)
    with open_lines(path) as fh:
        if ctx.columnar:
            yield from _read_columns(fh, asm)
        else:
            yield from asm.read_records(iter_json_lines(fh, ctx))
    yield from asm.drain()
    ctx.notes[str(path)] = asm.notes()


def _read_columns(fh: BinaryIO, asm: Assembler) -> Iterator[SourceRecord | RowBatch]:
    """Clean batches in columns, rollouts in flight carried between them as their event lines;
    any other batch event by event.

    The carried lines are parsed again with each batch, so a batch is read at twice the text in
    flight at least (a training step of thousands of rollouts logged turn by turn holds tens of
    MB); a batch still smaller than that (the file's last) goes event by event, its rollouts kept
    in the assembler until fewer are in flight."""
    carry: list[tuple[int, str]] | None = []  # None: the rollouts in flight are in ``asm``
    held = 0  # characters in flight

    def size() -> int:
        return max(line_batches.BATCH_BYTES, 2 * held)

    for batch in iter_batches(fh, asm.ctx, size):
        fits = batch.clean and held <= len(batch.data)
        if carry is None and fits:
            carry = asm.release()
        got = columns.read_batch(batch, carry, asm) if carry is not None and fits else None
        if got is not None:
            rows, carry = got
            held = sum(len(t) for _, t in carry)
            yield from rows
            continue
        if carry is not None:
            asm.restore(carry)
            carry = None
        yield from asm.read_records(batch.records(asm.ctx))
        held = asm.in_flight_chars()
    if carry is not None:
        asm.restore(carry)
