"""GRPO prompts: verl's RL parquet shape (DDAI's SlideVQA set, ``ddai curate`` output, fixtures)
read into ``Task`` records.

Columns used: ``id``, ``prompt`` (system + user chat messages: the Searcher prompt), ``file_name``,
``reference_page`` (page numbers), ``data_source``, ``reward_model.ground_truth`` and
``extra_info.question`` / ``extra_info.answer``. Golden pages are ``{file_name without .pdf}_{page}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ddai.trainer.search.chat import normalize_messages


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


def golden_pages(file_name: str | None, pages: list[Any] | None) -> list[str]:
    """DDAI's golden page basenames: ``{file_name without extension}_{page}``."""
    if not file_name or not pages:
        return []
    doc = Path(str(file_name)).stem
    return [f"{doc}_{int(p)}" for p in pages]


def _question(row: dict[str, Any], messages: list[dict[str, str]]) -> str:
    extra = row.get("extra_info") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    q = extra.get("question")
    if q:
        return str(q)
    users = [m["content"] for m in messages if m["role"] == "user"]
    return users[-1] if users else ""


def task_from_row(row: dict[str, Any], index: int = 0) -> Task:
    """A ``Task`` from one verl-shaped row."""
    if "prompt" not in row:
        raise ValueError(
            f"row {index}: no `prompt` column (verl RL shape expected), got {sorted(row)}"
        )
    messages = normalize_messages(row["prompt"])
    extra = row.get("extra_info") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    rm = row.get("reward_model") or {}
    if isinstance(rm, str):
        rm = json.loads(rm)
    file_name = row.get("file_name") or extra.get("file_name")
    ref_pages = row.get("reference_page")
    if ref_pages is None:
        ref_pages = extra.get("reference_page")
    answer = rm.get("ground_truth") or extra.get("answer")
    return Task(
        uid=str(row.get("id") or row.get("uid") or f"row_{index}"),
        messages=tuple(messages),
        question=_question(row, messages),
        reference_answer=None if answer is None else str(answer),
        reference_pages=tuple(golden_pages(file_name, list(ref_pages or []))),
        file_name=file_name,
        data_source=row.get("data_source"),
        doc_id=Path(str(file_name)).stem if file_name else None,
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
