"""Selected rollouts as Python rows: ``ddai.pipelines.distill.fetch``'s ``locate`` and
``fetch_batches`` gathered into one list, in the order asked, for tests to compare row by row."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ddai.pipelines.distill.fetch import fetch_batches, locate


def fetch_rows(
    files: Sequence[str | os.PathLike[str]],
    keys: pa.Table,
    rows: Sequence[int],
    *,
    batch_rows: int = 10_000,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Full rollout rows (``ROLLOUT_SCHEMA``) of ``keys.take(rows)``, in the order of ``rows``.

    ``keys`` is ``selection_columns``'s table. ``fetch_batches`` materializes only the selected
    rows, in Arrow batches of ``batch_rows`` that become dicts one batch at a time."""
    if not rows:
        return []
    out: list[dict[str, Any] | None] = [None] * len(rows)
    wanted = locate(files, keys, rows)
    for part in fetch_batches(files, wanted, batch_rows=batch_rows, threads=threads):
        slots = part["_slot"].to_pylist()
        for slot, row in zip(slots, part.drop_columns(["_slot"]).to_pylist(), strict=True):
            out[slot] = row
    return out  # type: ignore[return-value]
