"""The rollout log (DESIGN.md, "The rollout log"): one row per rollout, as a pyarrow schema.

``normalize_rollout`` turns a loose input record (native JSONL/Parquet row or an adapter's output)
into a row of this schema: typed, with derived fields filled and unknown keys folded into ``extra``.
It raises ``RowError`` (with a reason) for rows that cannot be read; ingest quarantines those.
Longer than 400 lines because the schema, its normaliser and the success rule are one contract.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from ddai.pipelines.records import metrics, tags
from ddai.pipelines.records.deps import pa
from ddai.pipelines.records.success import SUCCESS_THRESHOLD, is_success  # noqa: F401 (re-exported)

# 2: the ``flags`` column (rollouts kept with a known defect, e.g. ``turns_incomplete``).
# Partitions of version 1 read with ``flags`` null.
SCHEMA_VERSION = "2"
ACTION_NAMES = ("search", "bbox", "search_complete", "invalid")
TERMINATIONS = ("complete", "max_turns", "invalid", "error")
# A kept rollout some of whose turns are missing from the source (``extra.turns_missing`` lists
# their indexes): its scores count, its text is not whole (distillation leaves it out).
TURNS_INCOMPLETE = "turns_incomplete"
# A kept rollout one of whose scores was NaN or ±inf in the source: stored null, the source value
# in ``extra.nonfinite`` (``{"reward": "nan"}``), counted by this flag; distillation leaves it out.
NONFINITE = "nonfinite_score"
# A kept rollout one of whose fields came in another JSON type and was converted (``"3"`` for an
# integer, ``5`` for a string, ``7`` for ``terminated``): ``extra.coerced`` maps the field to
# ``{"source": <value as given>, "stored": <value kept>}``; counted by this flag.
COERCED = "coerced_type"
# A kept rollout with an integer score past float64's precision (``2**70 + 1``): stored as the
# nearest float, the exact source integer in ``extra.inexact`` (as text); counted by this flag.
INEXACT = "inexact_number"
_EXACT_FLOAT = 2**53


@functools.cache
def _turn_type() -> pa.DataType:
    return pa.struct(
        [
            ("idx", pa.int32()),
            ("think", pa.string()),
            ("action", pa.string()),
            ("arg", pa.string()),
            ("sep", pa.string()),
            ("forced", pa.bool_()),
            ("retrieved", pa.list_(pa.string())),
            ("observation", pa.string()),
            ("error", pa.string()),
            ("value", pa.float64()),
        ]
    )


# The rollout log's columns, in order, with their Arrow types by name (``_ARROW_TYPES``): the
# names read without pyarrow, which loads when the schema is first built.
_COLUMN_TYPES = {
    "run_id": "string",
    "step": "int32",
    "uid": "string",
    "rollout_idx": "int32",
    "sample_idx": "int32",
    "data_source": "string",
    "question": "string",
    "reference_answer": "string",
    "file_name": "string",
    "reference_pages": "strings",
    "response": "string",
    "turns": "turns",
    "retrieved_pages": "strings",
    "answer": "string",
    "judge_score": "float64",
    "ndcg": "float64",
    "format_ok": "bool",
    "reward": "float64",
    "reward_parts": "scores",
    "advantage": "float64",
    "num_turns": "int32",
    "terminated": "string",
    "extra": "string",
    "flags": "strings",
}
COLUMNS = tuple(_COLUMN_TYPES)
# The scores the log bounds (DESIGN.md, "The rollout log"), as (low, high), both included. A finite
# value outside its range cannot be a judge's score or an NDCG (a scale mistake, a corrupt field):
# the row is refused as ``score out of range`` and quarantined, so it never skews a per-prompt mean
# or a success count. NaN/inf stays the ``nonfinite_score`` flag; ``reward``, ``advantage`` and
# the turns' values are unbounded. The columnar readers decline a batch holding one
# (``line_batches.scores_in_range``), so the per-row path quarantines it.
SCORE_RANGES: dict[str, tuple[float, float]] = {"judge_score": (0.0, 1.0), "ndcg": (0.0, 1.0)}
OUT_OF_RANGE = "score out of range"


@functools.cache
def _rollout_schema() -> pa.Schema:
    types = {
        "string": pa.string(),
        "int32": pa.int32(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "strings": pa.list_(pa.string()),
        "turns": pa.list_(_turn_type()),
        "scores": pa.map_(pa.string(), pa.float64()),
    }
    return pa.schema(
        [(c, types[t]) for c, t in _COLUMN_TYPES.items()],
        metadata={b"schema_version": SCHEMA_VERSION.encode()},
    )


# The Arrow forms of the schema are built on first use (PEP 562), so that importing this module
# (every command's ``--help`` does, through the store) loads no pyarrow.
_ARROW = {"TURN_TYPE": _turn_type, "ROLLOUT_SCHEMA": _rollout_schema}


def __getattr__(name: str) -> Any:
    build = _ARROW.get(name)
    if build is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return build()


_FLOAT_COLS = tuple(c for c, t in _COLUMN_TYPES.items() if t == "float64")
# ``extra`` is built from the record's unknown keys, not read as a string column
_STR_COLS = tuple(c for c, t in _COLUMN_TYPES.items() if t == "string" and c != "extra")
_STRLIST_COLS = tuple(c for c, t in _COLUMN_TYPES.items() if t == "strings")
INT32_MAX = 2**31 - 1


class RowError(ValueError):
    """A row that cannot become a rollout; ``reason`` is a short, countable key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _int(
    name: str,
    v: Any,
    *,
    required: bool = False,
    nonneg: bool = False,
    coerced: dict[str, Any] | None = None,
) -> int | None:
    if v is None:
        if required:
            raise RowError("missing required key", name)
        return None
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise RowError("wrong type", f"{name} must be an integer, got {type(v).__name__}")
    try:
        f = float(v)
    except ValueError as e:
        raise RowError("wrong type", f"{name} must be an integer, got {v!r}") from e
    if not math.isfinite(f) or f != int(f) or abs(f) > INT32_MAX:
        raise RowError("wrong type", f"{name} must be an int32, got {v!r}")
    if nonneg and f < 0:
        raise RowError("negative index", f"{name} = {int(f)}")
    if isinstance(v, str) and coerced is not None:
        coerced[name] = {"source": v, "stored": int(f)}
    return int(f)


def _float(
    name: str,
    v: Any,
    nonfinite: dict[str, str] | None = None,
    coerced: dict[str, Any] | None = None,
    inexact: dict[str, str] | None = None,
) -> float | None:
    """A finite float, or None; a NaN/inf is recorded under ``name`` in ``nonfinite``, a string
    converted in ``coerced``, an integer a float cannot hold exactly in ``inexact``."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise RowError("wrong type", f"{name} must be a number, got {type(v).__name__}")
    try:
        f = float(v)
    except ValueError as e:
        raise RowError("wrong type", f"{name} must be a number, got {v!r}") from e
    if isinstance(v, str) and coerced is not None:
        coerced[name] = {"source": v, "stored": f if math.isfinite(f) else str(f)}
    if isinstance(v, int) and abs(v) > _EXACT_FLOAT and inexact is not None and int(f) != v:
        inexact[name] = str(v)
    if math.isfinite(f):
        return f
    if nonfinite is not None:
        nonfinite[name] = str(f)
    return None


def _str(
    name: str, v: Any, *, required: bool = False, coerced: dict[str, Any] | None = None
) -> str | None:
    if v is None:
        if required:
            raise RowError("missing required key", name)
        return None
    if isinstance(v, str):
        if required and not v:
            raise RowError("missing required key", f"{name} is empty")
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        if coerced is not None:
            coerced[name] = {"source": v, "stored": str(v)}
        return str(v)
    raise RowError("wrong type", f"{name} must be a string, got {type(v).__name__}")


def _strlist(name: str, v: Any) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, str | bytes) or not hasattr(v, "__iter__"):
        raise RowError("wrong type", f"{name} must be a list of strings")
    out = []
    for x in v:
        if not isinstance(x, str):
            raise RowError("wrong type", f"{name} must be a list of strings")
        out.append(x)
    return out


def _turn_record(
    t: Any,
    i: int,
    nonfinite: dict[str, str] | None = None,
    coerced: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if isinstance(t, tags.Turn):
        return t.to_record()
    if not isinstance(t, dict):
        raise RowError("wrong type", "turns must be a list of objects")
    action = t.get("action") or "invalid"
    if action not in ACTION_NAMES:
        raise RowError("wrong type", f"turn action {action!r} not in {ACTION_NAMES}")
    forced = t.get("forced")
    if forced is not None and not isinstance(forced, bool) and coerced is not None:
        coerced[f"turns[{i}].forced"] = {"source": forced, "stored": bool(forced)}
    return {
        "idx": _int("turns.idx", t.get("idx", i), coerced=coerced),
        "think": _str(f"turns[{i}].think", t.get("think"), coerced=coerced),
        "action": action,
        "arg": _str(f"turns[{i}].arg", t.get("arg"), coerced=coerced),
        "sep": _str(f"turns[{i}].sep", t.get("sep"), coerced=coerced),
        "forced": bool(forced or False),
        "retrieved": _strlist("turns.retrieved", t.get("retrieved")),
        "observation": _str(f"turns[{i}].observation", t.get("observation"), coerced=coerced),
        "error": _str(f"turns[{i}].error", t.get("error"), coerced=coerced),
        "value": _float(f"turns[{i}].value", t.get("value"), nonfinite, coerced),
    }


def retrieved_from_turns(turns: list[dict[str, Any]]) -> list[str]:
    pages: list[str] = []
    # Any turn that retrieved counts: an invalid turn whose first action still ran (DDAI executes
    # it) shows pages too.
    for t in turns:
        pages.extend(t.get("retrieved") or [])
    return metrics.dedupe(pages)


def normalize_rollout(
    rec: dict[str, Any], *, run_id: str | None = None, max_turns: int | None = None
) -> dict[str, Any]:
    """Type-check and complete one rollout record; unknown keys go to ``extra`` (JSON text).

    ``run_id`` (from ``--run-id``) wins over the record's own; the record's differing one is kept
    as ``extra.source_run_id``. Raises ``RowError`` for missing required keys, wrong types,
    negative indexes (``negative index``) and a finite score outside its ``SCORE_RANGES`` range
    (``score out of range``, each such field and value in the detail). A NaN/inf score is stored null, its source value in
    ``extra.nonfinite``, and the row flagged ``nonfinite_score``. A value converted from another
    JSON type (a number for a string column, a string for a number, a non-boolean ``forced``) is
    listed in ``extra.coerced`` (source and stored value) and the row flagged ``coerced_type``; an
    integer score past float64's precision keeps its exact text in ``extra.inexact``, flagged
    ``inexact_number``.
    """
    if not isinstance(rec, dict):
        raise RowError("wrong type", "a row must be a JSON object")
    extra: dict[str, Any] = {}
    raw_extra = rec.get("extra")
    if isinstance(raw_extra, str) and raw_extra:
        try:
            loaded = json.loads(raw_extra)
        except ValueError:
            loaded = {"extra": raw_extra}
        extra.update(loaded if isinstance(loaded, dict) else {"extra": loaded})
    elif isinstance(raw_extra, dict):
        extra.update(raw_extra)
    for k, v in rec.items():
        if k not in COLUMNS:
            extra[k] = v

    src_run = rec.get("run_id")
    if run_id is not None:
        if src_run is not None and src_run != run_id:
            extra["source_run_id"] = src_run
        src_run = run_id
    coerced: dict[str, Any] = {}
    inexact: dict[str, str] = {}
    row: dict[str, Any] = {"run_id": _str("run_id", src_run, required=True, coerced=coerced)}
    row["uid"] = _str("uid", rec.get("uid"), required=True, coerced=coerced)
    row["rollout_idx"] = _int(
        "rollout_idx", rec.get("rollout_idx"), required=True, nonneg=True, coerced=coerced
    )
    for c in ("step", "sample_idx", "num_turns"):
        row[c] = _int(c, rec.get(c), nonneg=True, coerced=coerced)
    nonfinite: dict[str, str] = {}
    for c in _STR_COLS:
        if c not in row:
            row[c] = _str(c, rec.get(c), coerced=coerced)
    for c in _FLOAT_COLS:
        row[c] = _float(c, rec.get(c), nonfinite, coerced, inexact)
    out_of_range = [
        f"{c} = {row[c]!r} is outside {lo:g}..{hi:g}"
        for c, (lo, hi) in SCORE_RANGES.items()
        if row[c] is not None and not lo <= row[c] <= hi
    ]
    if out_of_range:
        raise RowError(OUT_OF_RANGE, "; ".join(out_of_range))
    for c in _STRLIST_COLS:
        row[c] = _strlist(c, rec.get(c))
    row["flags"] = sorted(set(row["flags"])) if row["flags"] else None
    fmt = rec.get("format_ok")
    if fmt is not None and not isinstance(fmt, bool):
        raise RowError("wrong type", "format_ok must be a boolean")
    row["format_ok"] = fmt
    parts = rec.get("reward_parts")
    if parts is not None:
        if not isinstance(parts, dict):
            raise RowError("wrong type", "reward_parts must be an object of numbers")
        row["reward_parts"] = {
            str(k): _float(f"reward_parts.{k}", v, nonfinite, coerced, inexact)
            for k, v in parts.items()
        }
    else:
        row["reward_parts"] = None

    turns_in = rec.get("turns")
    if turns_in is not None:
        if isinstance(turns_in, str) or not hasattr(turns_in, "__iter__"):
            raise RowError("wrong type", "turns must be a list")
        turns = [_turn_record(t, i, nonfinite, coerced) for i, t in enumerate(turns_in)]
    elif row["response"] is not None:
        turns = [t.to_record() for t in tags.parse_turns(row["response"])]
    else:
        turns = None
    row["turns"] = turns
    if turns is not None:
        if row["num_turns"] is None:
            row["num_turns"] = len(turns)
        if row["retrieved_pages"] is None and any(t.get("retrieved") for t in turns):
            row["retrieved_pages"] = retrieved_from_turns(turns)
        if row["terminated"] is None:
            parsed = [
                tags.Turn(t["idx"], t["think"], t["action"], t["arg"], t["sep"], t["forced"])
                for t in turns
            ]
            row["terminated"] = tags.terminated_from(parsed, max_turns)
        if row["format_ok"] is None and turns:
            row["format_ok"] = all(t["action"] != "invalid" for t in turns) and (
                turns[-1]["action"] == "search_complete"
            )
            if row["format_ok"] and TURNS_INCOMPLETE in (row["flags"] or ()):
                row["format_ok"] = None  # a missing turn may have failed the gate: unknown
    if row["terminated"] is not None and row["terminated"] not in TERMINATIONS:
        extra.setdefault("source_terminated", row["terminated"])
        row["terminated"] = "error"
        if "terminated" in coerced:  # a number: what it became is "error", not its text
            coerced["terminated"]["stored"] = "error"
    for key, found, flag in (
        ("nonfinite", nonfinite, NONFINITE),
        ("coerced", coerced, COERCED),
        ("inexact", inexact, INEXACT),
    ):
        if found:
            extra[key] = found
            row["flags"] = sorted({*(row["flags"] or ()), flag})
    row["extra"] = json.dumps(extra, ensure_ascii=False, default=str, sort_keys=True)
    return row


def to_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=_rollout_schema())
