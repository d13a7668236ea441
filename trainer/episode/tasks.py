"""GRPO prompts: verl's RL parquet shape (DDAI's SlideVQA set, ``ddai curate`` output, fixtures)
read into ``Task`` records.

Each row's fields are read by ``ddai.pipelines.records.prompt_row``, the reader the funnel uses too;
``prompt`` (system + user chat messages: the Searcher prompt) is kept as the policy's prompt.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.records import prompt_row
from ddai.pipelines.records.deps import pq
from ddai.trainer.episode.chat import normalize_messages


@dataclass(frozen=True)
class Task:
    """One prompt of the training set."""

    uid: str
    messages: tuple[dict[str, str], ...]
    question: str
    reference_answer: str | None = None
    reference_pages: tuple[str, ...] = ()
    file_name: str | None = None
    data_source: str | None = None
    doc_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_row(self) -> dict[str, Any]:
        """The HF-dataset row the GRPO trainer iterates over (``prompt`` + task columns)."""
        return {
            "prompt": [dict(m) for m in self.messages],
            "uid": self.uid,
            "question": self.question,
            "reference_answer": self.reference_answer,
            "reference_pages": list(self.reference_pages),
            "file_name": self.file_name,
            "data_source": self.data_source,
            "doc_id": self.doc_id,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        return cls(
            uid=str(row["uid"]),
            messages=tuple(normalize_messages(row["prompt"])),
            question=str(row.get("question") or ""),
            reference_answer=row.get("reference_answer"),
            reference_pages=tuple(row.get("reference_pages") or ()),
            file_name=row.get("file_name"),
            data_source=row.get("data_source"),
            doc_id=row.get("doc_id"),
        )


def task_from_row(row: dict[str, Any], index: int = 0) -> Task:
    """A ``Task`` from one verl-shaped row (fields read by ``ddai.pipelines.records.prompt_row``, as the
    funnel reads them)."""
    if "prompt" not in row:
        raise ValueError(
            f"row {index}: no `prompt` column (verl RL shape expected), got {sorted(row)}"
        )
    answer = prompt_row.reference_of(row)
    return Task(
        uid=prompt_row.uid_of(row, index),
        messages=tuple(normalize_messages(row["prompt"])),
        question=prompt_row.question_of(row),
        reference_answer=answer or None,
        reference_pages=tuple(prompt_row.reference_page_ids(row)),
        file_name=prompt_row.file_name_of(row),
        data_source=row.get("data_source"),
        doc_id=prompt_row.doc_id_of(row),
    )


def load_tasks(path: str | os.PathLike[str], limit: int | None = None) -> list[Task]:
    """Tasks from a Parquet or JSONL file in verl's RL shape (the first ``limit`` rows)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: dataset not found; make one with `ddai fixtures make OUT`")
    if p.suffix == ".parquet":
        rows = (
            pq.read_table(p).slice(0, limit).to_pylist() if limit else pq.read_table(p).to_pylist()
        )
    else:
        lines = [ln for ln in p.read_text("utf-8").splitlines() if ln.strip()]
        rows = [json.loads(ln) for ln in lines[:limit] if ln]
    return [task_from_row(r, i) for i, r in enumerate(rows)]
