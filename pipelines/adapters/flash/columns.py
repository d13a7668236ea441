"""DDAI's ``flash_rm_detail.jsonl`` read in columns: one clean ``LineBatch`` → one ``RowBatch``.

The batch is parsed by Arrow's JSON reader (the known fields typed, so a value of another type
or a key given twice makes it refuse the batch), then mapped as ``ddai_common.flash_rollout`` +
``schema.normalize_rollout`` do, as polars expressions over the whole batch. It takes a batch only
when every row is one the per-row path would keep as is; otherwise it returns None and the reader
sends that batch through the per-row path, which quarantines or converts each row exactly as
before. It declines:

- a batch the parser refuses or whose schema is not the expected one: a known field of another
  type (a string ``local_idx``, a numeric ``uid``, a list holding a non-string), a field that
  ``flash_rollout`` renames (``run_id``, ``turns``, ... → ``source_*``) or drops (``event_type``),
  or an unknown field holding objects (their keys differ row by row, which a column cannot keep)
  or strings Arrow reads as timestamps;
- a row the schema would refuse or flag: no ``uid`` or an empty one, no ``local_idx``, a
  negative or past-int32 index, a null inside a page list, a non-finite score, a ``judge_score``
  or ``ndcg`` outside its range (``schema.SCORE_RANGES``: quarantined by the per-row path).

``extra`` holds the unknown fields, keys sorted, as ``normalize_rollout`` writes it; a field that
is null in a row is kept as ``null`` when the line names it (``"error": null``) and left out when
the line does not. Numbers are written as polars writes them (``0.00001`` for Python's ``1e-05``):
the same values, not always the same text.
"""

from __future__ import annotations

import re

from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.ddai_common import _RESERVED, FLASH_FIELDS
from ddai.pipelines.adapters.line_batches import (
    LineBatch,
    json_object,
    read_json,
    rollout_table,
    scores_in_range,
)
from ddai.pipelines.records.deps import pa, pc, pj, pl
from ddai.pipelines.records.schema import COLUMNS, INT32_MAX

_STRING = ("uid", "query", "generated_answer", "reference_answer")
_INT = ("local_idx", "sample_idx")
_FLOAT = ("judge_score", "ndcg", "final_score")
_PAGES = ("retrieved_basenames", "reference_basenames")
KNOWN = frozenset((*_STRING, *_INT, *_FLOAT, *_PAGES))
# The known fields' types: Arrow's JSON reader refuses a batch where a value is of another type
# (a string index, a numeric uid, a number in a page list), and that batch goes by rows.
KNOWN_SCHEMA = pa.schema(
    [(c, pa.string()) for c in _STRING]
    + [(c, pa.int64()) for c in _INT]
    + [(c, pa.float64()) for c in _FLOAT]
    + [(c, pa.list_(pa.string())) for c in _PAGES]
)
# Fields the per-row mapping renames or drops, and column names it would read as columns.
_DECLINE = (_RESERVED | set(COLUMNS) | {"event_type"}) - KNOWN - set(FLASH_FIELDS.values())
# The question is the query cut at its first "\n<space>*assistant" (ddai_common._ASSISTANT_TAIL_RE;
# Python's \s also takes \x1c-\x1f, Rust's does not).
_ASSISTANT_TAIL = r"\n[\s\x1c-\x1f]*assistant\b(?s:.*)"
_PARSE = pj.ParseOptions(explicit_schema=KNOWN_SCHEMA, unexpected_field_behavior="infer")


def _plain(t: pa.DataType) -> bool:
    """A type whose values polars writes back as the JSON they were read from."""
    while pa.types.is_list(t):
        t = t.value_type
    return (
        pa.types.is_null(t)
        or pa.types.is_boolean(t)
        or pa.types.is_int64(t)
        or pa.types.is_float64(t)
        or pa.types.is_string(t)
    )


def _schema_ok(schema: pa.Schema) -> bool:
    names = set(schema.names)
    return (
        not (_DECLINE & names)
        and not any(c.startswith("source_") for c in names)
        # objects (keys differ row by row) and strings Arrow read as timestamps are not kept as is
        and all(_plain(f.type) for f in schema if f.name not in KNOWN)
    )


def _rows_ok(df: pl.DataFrame) -> bool:
    checks = [
        (pl.col("uid").str.len_bytes() > 0).fill_null(False).all(),
        pl.col("local_idx").is_between(0, INT32_MAX).fill_null(False).all(),
        (pl.col("sample_idx").is_null() | pl.col("sample_idx").is_between(0, INT32_MAX)).all(),
        *[(pl.col(c).is_null() | pl.col(c).is_finite()).all() for c in _FLOAT],
        *scores_in_range(),  # (judge_score and ndcg: named in the payload as in the log)
    ]
    return bool(df.select(pl.all_horizontal(checks)).item())


def field_json(df: pl.DataFrame, c: str, lines: pl.Series) -> pl.Expr:
    """Field ``c`` as ``"c":value`` for ``extra``; a null kept when the line names the key (a
    nested key of that name counts too), else left out. ``lines``: the rows' lines."""
    frag = pl.struct(c).struct.json_encode().str.slice(1).str.strip_suffix("}")
    if df[c].null_count():
        named = lines.str.contains(f'"{re.escape(c)}"\\s*:')
        frag = pl.when(pl.col(c).is_not_null() | pl.lit(named)).then(frag)
    return frag


def _extra(df: pl.DataFrame, lines: pl.Series) -> pl.Expr:
    """``extra`` as JSON text: the unknown fields, keys sorted, each as ``"key":value``."""
    parts = [field_json(df, c, lines) for c in sorted(c for c in df.columns if c not in KNOWN)]
    return json_object(parts) if parts else pl.lit("{}")


def mapped() -> dict[str, pl.Expr]:
    """The rollout columns ``flash_rollout`` maps from a payload's fields, as expressions (those
    a unified log's reward gives alike)."""
    first = pl.col("reference_basenames").list.first()
    return {
        "question": pl.col("query").str.replace(_ASSISTANT_TAIL, ""),
        "reference_answer": pl.col("reference_answer"),
        "file_name": pl.when(first.str.contains("_", literal=True)).then(
            first.str.replace(r"_[^_]*$", "") + ".pdf"
        ),
        "reference_pages": pl.col("reference_basenames"),
        "answer": pl.col("generated_answer"),
        "judge_score": pl.col("judge_score"),
        "ndcg": pl.col("ndcg"),
        "reward": pl.col("final_score"),
    }


def to_rows(batch: LineBatch, run_id: str) -> tuple[RowBatch, list] | None:
    """The batch's rollouts (and the distinct ``pid``s it names), or None to read it per row."""
    lines = batch.lines()
    parsed = read_json(batch.data, _PARSE, len(lines))
    if parsed is None or not _schema_ok(parsed.schema):
        return None
    if any(pc.list_flatten(parsed[c]).null_count for c in _PAGES):  # a null page name
        return None
    df = pl.from_arrow(parsed)
    if not _rows_ok(df):
        return None
    out = df.select(
        uid=pl.col("uid"),
        rollout_idx=pl.col("local_idx").cast(pl.Int32),
        sample_idx=pl.col("sample_idx").cast(pl.Int32),
        retrieved_pages=pl.col("retrieved_basenames"),
        extra=_extra(df, pl.Series(lines)),
        **mapped(),
    ).to_arrow()
    cols = {c: out[c] for c in out.column_names}
    cols["run_id"] = pa.array([run_id] * df.height, pa.string())
    pids = df["pid"].unique().to_list() if "pid" in df.columns else [None]
    return batch.row_batch(rollout_table(cols, df.height), run_id), pids
