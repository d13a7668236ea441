"""SFT rows as text conversations (``ddai train sft`` with a text model): Parquet/JSONL files
with a ``messages`` column (``ddai distill`` output, DDAI ``train1``), each row's messages
flattened to text (DDAI's ``[{"image": path}]`` observations become ``[image: path]``, counted),
rows without a Searcher turn dropped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.pipelines.records.deps import pq
from ddai.trainer import common
from ddai.trainer.episode.chat import flatten_messages


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Rows with a ``messages`` column from Parquet/JSONL files."""
    import json

    out: list[dict[str, Any]] = []
    for p in paths:
        if not p.is_file():
            raise common.TrainConfigError(f"--data {p}: file not found")
        if p.suffix == ".parquet":
            rows = pq.read_table(p).to_pylist()
        else:
            rows = [json.loads(line) for line in p.read_text("utf-8").splitlines() if line.strip()]
        if rows and "messages" not in rows[0]:
            raise common.TrainConfigError(
                f"--data {p}: no `messages` column (got {sorted(rows[0])}); pass `ddai distill` "
                "output or a DDAI train1 file"
            )
        out.extend(rows)
    return out


def load_conversations(
    paths: list[Path],
) -> tuple[list[list[dict[str, str]]], dict[str, int], int]:
    """Conversations from Parquet/JSONL files as text, with drop counts by reason and the number
    of kept turns whose images became ``[image: path]`` text."""
    convs: list[list[dict[str, str]]] = []
    dropped: dict[str, int] = {}
    flattened = 0
    for row in read_rows(paths):
        try:
            msgs, images = flatten_messages(row["messages"])
        except (ValueError, KeyError, TypeError):
            dropped["unreadable messages"] = dropped.get("unreadable messages", 0) + 1
            continue
        if not any(m["role"] == "assistant" for m in msgs):
            dropped["no assistant turn"] = dropped.get("no assistant turn", 0) + 1
            continue
        convs.append(msgs)
        flattened += images
    if not convs:
        raise common.TrainConfigError(
            f"--data: no usable conversation in {[str(p) for p in paths]}"
        )
    return convs, dropped, flattened
