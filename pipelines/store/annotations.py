"""Annotations: labels a person puts on a prompt, a rollout or one of its turns, kept as data.

Each annotation is one row of its run's side table ``annotations`` (``side_log``): appended
under the run's write lock and listed with its row count and sha256 in the run's manifest, so
``ddai lineage --check`` sees a changed one. Rows are never rewritten: withdrawing a label is a
new row naming the one it retracts. The ``annotations`` view (``sql/annotations.sql``) reads the
rows in force of the runs a connection reads, with their ids (``run_id``, ``uid``, ``step``,
``rollout_idx``, ``turn``), who wrote them and when; ``ddai query`` exports them like any view.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

TABLE = "annotations"
LABELS = (
    "wrong ground truth",
    "ambiguous question",
    "search failure",
    "generator failure",
    "format failure",
    "good demonstration",
)
TARGETS = ("prompt", "rollout", "turn")
NOTE_CHARS = 4000
# The side table's columns and their DuckDB types (the view's source; ``duckdb_schema``).
COLUMNS = {
    "annotation_id": "VARCHAR",
    "run_id": "VARCHAR",
    "uid": "VARCHAR",
    "step": "BIGINT",
    "rollout_idx": "BIGINT",
    "turn": "BIGINT",
    "target": "VARCHAR",
    "label": "VARCHAR",
    "note": "VARCHAR",
    "annotator": "VARCHAR",
    "created_at": "VARCHAR",
    "retracts": "VARCHAR",
}


def annotator_name(given: str | None = None) -> str:
    """Who annotates: ``given`` (``--annotator``), else ``$USER``; refuses an empty name."""
    name = (given or os.environ.get("USER") or "").strip()
    if not name:
        raise ValueError("no annotator name: pass --annotator NAME (or set $USER)")
    return name


def _whole(name: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if n < 0:
        raise ValueError(f"{name} must be 0 or more, got {n}")
    return n


def make_row(
    *,
    run_id: str,
    uid: str,
    annotator: str,
    label: str | None = None,
    note: str = "",
    step: Any = None,
    rollout_idx: Any = None,
    turn: Any = None,
    retracts: str | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """One annotation row, checked. The target follows from the ids given: ``turn`` (with
    ``rollout_idx``) a turn, ``rollout_idx`` a rollout, neither the prompt ``uid`` of the run.
    A row needs a label from ``LABELS`` or a note (or ``retracts``: the id it withdraws)."""
    from ddai.pipelines.store.store_read import check_run_id

    check_run_id(run_id)
    if not isinstance(uid, str) or not uid:
        raise ValueError("an annotation needs the prompt's uid")
    step_n, idx, turn_n = _whole("step", step), _whole("rollout_idx", rollout_idx), None
    turn_n = _whole("turn", turn)
    if turn_n is not None and idx is None:
        raise ValueError("a turn's annotation needs its rollout (rollout_idx)")
    target = "turn" if turn_n is not None else "rollout" if idx is not None else "prompt"
    label = (label or "").strip() or None
    if label is not None and label not in LABELS:
        raise ValueError(f"label {label!r} is not one of: {', '.join(LABELS)}")
    note = (note or "").strip()
    if len(note) > NOTE_CHARS:
        raise ValueError(f"a note holds at most {NOTE_CHARS} characters, got {len(note)}")
    if label is None and not note and not retracts:
        raise ValueError(f"an annotation needs a label ({', '.join(LABELS)}) or a note")
    stamp = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return {
        "annotation_id": uuid.uuid4().hex,
        "run_id": run_id,
        "uid": uid,
        "step": step_n,
        "rollout_idx": idx,
        "turn": turn_n,
        "target": target,
        "label": label,
        "note": note,
        "annotator": annotator_name(annotator),
        "created_at": stamp.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "retracts": retracts,
    }


def add(logs: str | os.PathLike[str], row: dict[str, Any]) -> dict[str, Any]:
    """Store ``row`` (``make_row``) in its run's side table through the store's commit; returns
    it. Refuses a run the store does not hold (nothing would list the table)."""
    from ddai.pipelines.store import side_log, store_read

    if store_read.run_manifest(logs, row["run_id"]) is None:
        raise FileNotFoundError(f"run {row['run_id']!r} is not in the log store {logs}")
    side_log.append_row(logs, row["run_id"], TABLE, row)
    return row


def committed_rows(logs: str | os.PathLike[str], run_id: str, rec: dict[str, Any]) -> list[dict]:
    """The rows ``rec`` (the run's manifest record of the table) lists: on a local store the
    file's first ``rec["rows"]`` lines (an append not listed yet is not read)."""
    from ddai.pipelines.store import objstore

    if objstore.is_url(logs) or "parts" in rec:
        from ddai.pipelines.store import side_log

        return side_log.read_rows(logs, TABLE, run_id)
    from ddai.pipelines.store.store_read import SIDE_DIR

    path = Path(logs) / SIDE_DIR / TABLE / f"{run_id}.jsonl"
    if not path.is_file():
        return []
    lines = path.read_text("utf-8").splitlines()[: int(rec.get("rows") or 0)]
    return [json.loads(line) for line in lines if line.strip()]


def rows_of(logs: str | os.PathLike[str], manifests: dict[str, dict[str, Any]]) -> list[dict]:
    """Every committed annotation row of the runs whose manifests are ``manifests``."""
    out: list[dict] = []
    for run, man in manifests.items():
        rec = (man.get("side_tables") or {}).get(TABLE)
        if rec:
            out.extend(committed_rows(logs, run, rec))
    return out


def duckdb_schema() -> str:
    """The JSON structure ``from_json`` reads the rows with (a list of structs)."""
    return json.dumps([COLUMNS])
