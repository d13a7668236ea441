"""DDAI's ``flash_rm_detail.jsonl`` read in columns: one clean ``LineBatch`` → one ``RowBatch``.

The same mapping as ``ddai_common.flash_rollout`` + ``schema.normalize_rollout``, as polars
expressions over the whole batch. It takes a batch only when every row is one the per-row path
would keep as is; otherwise it returns None and the reader sends that batch through the per-row
path, which quarantines or converts each row exactly as before. It declines:

- a batch the parser refuses or whose schema is not the expected one: a known field of another
  type (a string ``local_idx``, a numeric ``uid``, a list holding a non-string), a field that
  ``flash_rollout`` renames (``run_id``, ``turns``, ... → ``source_*``) or drops (``event_type``),
  or an unknown field holding objects (their keys differ row by row, which a column cannot keep);
- a row the schema would refuse or flag: no ``uid`` or an empty one, no ``local_idx``, a
  negative or past-int32 index, a null inside a page list, a non-finite score.

``extra`` holds the unknown fields, keys sorted, as ``normalize_rollout`` writes it; a field that
is null in a row is kept as ``null`` when the line names it (``"error": null``) and left out when
the line does not. Numbers are written as polars writes them (``0.00001`` for Python's ``1e-05``):
the same values, not always the same text.
"""

from __future__ import annotations

import re

import polars as pl
import pyarrow as pa

from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.ddai_common import _RESERVED, FLASH_FIELDS
from ddai.pipelines.adapters.line_batches import LineBatch, too_deep
from ddai.pipelines.schema import COLUMNS, INT32_MAX, ROLLOUT_SCHEMA

_STRING = ("uid", "query", "generated_answer", "reference_answer")
_INT = ("local_idx", "sample_idx")
_FLOAT = ("judge_score", "ndcg", "final_score")
_PAGES = ("retrieved_basenames", "reference_basenames")
KNOWN = frozenset((*_STRING, *_INT, *_FLOAT, *_PAGES))
# Fields the per-row mapping renames or drops, and column names it would read as columns.
_DECLINE = (_RESERVED | set(COLUMNS) | {"event_type"}) - KNOWN - set(FLASH_FIELDS.values())
# The question is the query cut at its first "\n<space>*assistant" (ddai_common._ASSISTANT_TAIL_RE;
# Python's \s also takes \x1c-\x1f, Rust's does not).
_ASSISTANT_TAIL = r"\n[\s\x1c-\x1f]*assistant\b(?s:.*)"
_SCALARS = (pl.Boolean, pl.Int64, pl.Float64, pl.String, pl.Null)


def _scalar_or_list(dt: pl.DataType) -> bool:
    while isinstance(dt, pl.List):
        dt = dt.inner
    return dt in _SCALARS or isinstance(dt, pl.Int128)


def _schema_ok(schema: pl.Schema) -> bool:
    def is_(name: str, *types: type) -> bool:
        return name not in schema or any(schema[name] == t for t in types)

    return (
        schema.get("uid") == pl.String
        and schema.get("local_idx") == pl.Int64
        and is_("sample_idx", pl.Int64, pl.Null)
        and all(is_(c, pl.String, pl.Null) for c in _STRING)
        and all(is_(c, pl.Float64, pl.Int64, pl.Null) for c in _FLOAT)
        and all(is_(c, pl.List(pl.String), pl.List(pl.Null), pl.Null) for c in _PAGES)
        and not (_DECLINE & set(schema))
        and not any(c.startswith("source_") for c in schema)
        and all(_scalar_or_list(dt) for c, dt in schema.items() if c not in KNOWN)
    )


def _rows_ok(df: pl.DataFrame) -> bool:
    checks = [
        pl.col("uid").is_not_null().all() & (pl.col("uid").str.len_bytes() > 0).all(),
        pl.col("local_idx").is_between(0, INT32_MAX).all(),  # null is not between: refused
    ]
    if "sample_idx" in df.columns:
        checks.append(
            (pl.col("sample_idx").is_null() | pl.col("sample_idx").is_between(0, INT32_MAX)).all()
        )
    for c in _FLOAT:
        if c in df.columns:
            x = pl.col(c).cast(pl.Float64)
            checks.append((x.is_null() | x.is_finite()).all())
    for c in _PAGES:
        if c in df.columns and df.schema[c] != pl.Null:
            lst = pl.col(c)
            checks.append(
                (lst.list.len() == lst.list.drop_nulls().list.len()).fill_null(True).all()
            )
    return bool(df.select(pl.all_horizontal(checks)).item())


def _extra(df: pl.DataFrame, lines: pl.Series) -> pl.Expr:
    """``extra`` as JSON text: the unknown fields, keys sorted, each as ``"key":value``."""
    parts = []
    for c in sorted(c for c in df.columns if c not in KNOWN):
        frag = pl.struct(c).struct.json_encode().str.slice(1).str.strip_suffix("}")
        if df[c].null_count():
            # null: kept when the line names the key (a nested key of that name counts too)
            named = lines.str.contains(f'"{re.escape(c)}"\\s*:')
            frag = pl.when(pl.col(c).is_not_null() | pl.lit(named)).then(frag)
        parts.append(frag)
    if not parts:
        return pl.lit("{}")
    return pl.concat_str(
        [pl.lit("{"), pl.concat_str(parts, separator=",", ignore_nulls=True), pl.lit("}")]
    )


def _col(df: pl.DataFrame, name: str, dtype: pl.DataType) -> pl.Expr:
    return pl.col(name).cast(dtype) if name in df.columns else pl.lit(None, dtype)


def to_rows(batch: LineBatch, run_id: str) -> tuple[RowBatch, list] | None:
    """The batch's rollouts (and the distinct ``pid``s it names), or None to read it per row."""
    try:
        df = pl.read_ndjson(batch.data, infer_schema_length=None)
    except Exception:  # noqa: BLE001 - any refusal: the per-row path says why, row by row
        return None
    lines = batch.lines()
    if df.height != len(lines) or too_deep(df.schema) or not _schema_ok(df.schema):
        return None
    if not _rows_ok(df):
        return None
    pages = pl.List(pl.String)
    ref = _col(df, "reference_basenames", pages)
    first = ref.list.first()
    out = df.select(
        uid=pl.col("uid"),
        rollout_idx=pl.col("local_idx").cast(pl.Int32),
        sample_idx=_col(df, "sample_idx", pl.Int32),
        question=_col(df, "query", pl.String).str.replace(_ASSISTANT_TAIL, ""),
        reference_answer=_col(df, "reference_answer", pl.String),
        file_name=pl.when(first.str.contains("_", literal=True)).then(
            first.str.replace(r"_[^_]*$", "") + ".pdf"
        ),
        reference_pages=ref,
        retrieved_pages=_col(df, "retrieved_basenames", pages),
        answer=_col(df, "generated_answer", pl.String),
        judge_score=_col(df, "judge_score", pl.Float64),
        ndcg=_col(df, "ndcg", pl.Float64),
        reward=_col(df, "final_score", pl.Float64),
        extra=_extra(df, pl.Series(lines)),
    ).to_arrow()
    n = df.height
    cols = {}
    for f in ROLLOUT_SCHEMA:
        if f.name == "run_id":
            cols[f.name] = pa.array([run_id] * n, f.type) if n else pa.array([], f.type)
        elif f.name in out.column_names:
            cols[f.name] = out[f.name].cast(f.type)
        else:
            cols[f.name] = pa.nulls(n, f.type)
    table = pa.table(cols, schema=ROLLOUT_SCHEMA)
    pids = df["pid"].unique().to_list() if "pid" in df.columns else [None]
    first_line = batch.first_line
    return RowBatch(table, run_id, list(range(first_line, first_line + n)), batch.raws()), pids
