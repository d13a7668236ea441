"""Small hand-made inputs for the funnel tests: verl-shaped datasets and rollout logs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ddai.pipelines import store
from ddai.pipelines.fixtures.dataset import dataset_schema
from ddai.pipelines.store import io

# verl's RL parquet shape: the synthetic world's dataset schema (one definition).
VERL_SCHEMA = dataset_schema()
_HF = {
    "info": {
        "features": {
            "id": {"dtype": "string", "_type": "Value"},
            "extra_info": {"answer": {"dtype": "string", "_type": "Value"}},
        }
    }
}


def verl_rows(ids: Iterable[str]) -> list[dict[str, Any]]:
    """One verl RL row per id (``train_N`` → document ``N.pdf``, reference page 2)."""
    rows = []
    for i, uid in enumerate(ids):
        doc = uid.split("_")[-1]
        question = f"What is the value on slide 2 of deck {doc}?"
        rows.append(
            {
                "id": uid,
                "file_name": f"{doc}.pdf",
                "reference_page": [2],
                "data_source": "test",
                "prompt": [
                    {"content": "You are a search agent.", "role": "system"},
                    {"content": f"Question: {question}", "role": "user"},
                ],
                "reward_model": {"ground_truth": f"answer {doc}", "style": "rule"},
                "extra_info": {
                    "answer": f"answer {doc}",
                    "file_name": f"{doc}.pdf",
                    "index": i,
                    "question": question,
                    "reference_page": [2],
                    "split": "train",
                },
            }
        )
    return rows


def write_dataset(path: Path, ids: Iterable[str]) -> Path:
    """A verl-shaped dataset (with Hugging Face feature metadata) at ``path``."""
    table = pa.Table.from_pylist(verl_rows(ids), schema=VERL_SCHEMA)
    table = table.replace_schema_metadata({b"huggingface": json.dumps(_HF).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def rollout(uid: str, idx: int, **fields: Any) -> dict[str, Any]:
    return {"uid": uid, "rollout_idx": idx, **fields}


def group(uid: str, field: str, values: Iterable[float | None], **fields: Any) -> list[dict]:
    """One rollout per value of ``field`` for prompt ``uid``."""
    return [rollout(uid, i, **{field: v}, **fields) for i, v in enumerate(values)]


def write_log(logs: Path, run: str, rows: list[dict[str, Any]]) -> Path:
    """Store ``rows`` as run ``run``, recording a raw JSONL copy beside the store as its source."""
    raw = logs.parent / f"{run}.raw.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    src = {"path": str(raw.resolve()), "sha256": io.sha256_file(raw), "format": "ddai"}
    store.write_run(logs, run, rows, sources=[src], manifest={"rows_in": len(rows)})
    return store.partition_dir(logs, run)


def ids_of(path: Path) -> list[str]:
    return pq.read_table(path, columns=["id"])["id"].to_pylist()
