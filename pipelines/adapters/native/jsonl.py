"""ddai's own JSONL read in columns: one clean ``LineBatch`` → ``RowBatch``es (one per run).

Arrow's JSON reader parses the batch with the log's columns typed (integers as int64, then cast
to int32 only when every value fits), so a value of another type (a string index, a numeric uid,
a float step, a turn that is not an object) or a column given twice makes it refuse the batch.
``extra`` and ``reward_parts`` (objects whose keys differ row by row) are not parsed by Arrow:
DuckDB reads each line's key list and its ``extra`` as JSON text, as written. The batch, now in
``ROLLOUT_SCHEMA``'s types, goes through ``parquet.to_rows`` (the Parquet path's checks
and derivations), and that returns None for any row the per-row path would refuse or rewrite.

Declined here too (the reader then sends the batch through the per-row path, which quarantines
or converts each line exactly as before):

- a key that is not a log column (the per-row path moves it into ``extra``) or a key given twice,
  at the top or inside an ``extra`` object;
- a ``reward_parts`` that is not null (the per-row path reads it as a map of numbers);
- an ``extra`` that is neither an object, a string nor null (the per-row path drops it).
"""

from __future__ import annotations

import json

from ddai.pipelines.adapters.base import RowBatch, repeated_key
from ddai.pipelines.adapters.line_batches import LineBatch, duck, read_json
from ddai.pipelines.adapters.native import parquet
from ddai.pipelines.records.deps import duckdb, pa, pj, pl
from ddai.pipelines.records.row_checks import digest_bytes
from ddai.pipelines.records.schema import COLUMNS, ROLLOUT_SCHEMA


def _wide(t: pa.DataType) -> pa.DataType:
    """``t`` with int32 widened to int64 (the JSON reader's integer type), nested included."""
    if t == pa.int32():
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(_wide(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([(f.name, _wide(f.type)) for f in t])
    return t


# Read by Arrow: every column but the two objects DuckDB reads as text.
_BY_DUCKDB = ("extra", "reward_parts")
JSON_SCHEMA = pa.schema(
    [(f.name, _wide(f.type)) for f in ROLLOUT_SCHEMA if f.name not in _BY_DUCKDB]
)
_PARSE = pj.ParseOptions(explicit_schema=JSON_SCHEMA, unexpected_field_behavior="ignore")


def _extra(lines: pa.LargeStringArray) -> pa.Array | None:
    """Each line's ``extra`` as the per-row path reads it, before ``normalize_rollout``: an
    object's JSON text, a string as is, null when absent or null; None to decline the batch."""
    con = duck()
    try:
        con.register("b", pa.table({"l": lines}))
        # one parse per line: its keys and both objects' JSON text (NULL when absent)
        df = pl.from_arrow(
            con.sql(
                "SELECT k, x[1]::VARCHAR AS e, x[2]::VARCHAR AS r FROM (SELECT json_keys(l) AS k, "
                "json_extract(l, ['$.extra', '$.reward_parts']) AS x FROM b)"
            ).to_arrow_table()
        )
    except duckdb.Error:
        return None
    finally:
        con.unregister("b")
    assert isinstance(df, pl.DataFrame)
    e = pl.col("e")
    ok = df.select(
        (pl.col("r").is_null() | (pl.col("r") == "null")).all()
        & (e.is_null() | e.str.head(1).is_in(["{", '"', "n"])).all()
        & (pl.col("k").list.n_unique() == pl.col("k").list.len()).all()
        & pl.col("k").explode().is_in(list(COLUMNS)).all()
    ).item()
    if not ok:  # reward_parts set, an extra of another type, a key twice or not a log column
        return None
    obj = e.str.starts_with("{")
    if nested_repeat(df.filter(obj)["e"].to_list()):
        return None
    if df.select(obj | e.is_null()).to_series().all():
        return df.select(e).to_arrow()["e"].combine_chunks().cast(pa.string())
    # null, or JSON text written as a string (rare): the value itself, as the per-row path reads it
    texts = df["e"].to_list()
    return pa.array([t if t is None or t[0] == "{" else json.loads(t) for t in texts], pa.string())


def nested_repeat(texts: list[str]) -> bool:
    """True when an ``extra`` object names a key twice at any depth (DuckDB hands the text over as
    written, both values in it; the per-row path quarantines such a line as ``duplicate JSON
    key``). Each text is parsed once; only texts whose key count shows a repeat are re-read."""
    return any(repeated_key(t, json.loads(t)) for t in texts if t != "{}")


def to_rows(batch: LineBatch, run_id: str | None) -> list[RowBatch] | None:
    """The batch's rollouts, one ``RowBatch`` per run, or None to read it per row."""
    lines = batch.lines()
    parsed = read_json(batch.data, _PARSE, len(lines))
    extra = _extra(lines) if parsed is not None else None
    if parsed is None or extra is None:
        return None
    cols = []
    for f in ROLLOUT_SCHEMA:
        if f.name == "extra":
            cols.append(extra)
        elif f.name == "reward_parts":
            cols.append(pa.nulls(parsed.num_rows, f.type))
        else:
            try:  # safe cast: an integer past int32 raises (the per-row path refuses it)
                cols.append(parsed[f.name].combine_chunks().cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
    table = pa.RecordBatch.from_arrays(cols, schema=ROLLOUT_SCHEMA)
    raws = batch.raws()
    got = parquet.to_rows(table, run_id, batch.first_line, [digest_bytes(r) for r in raws])
    if got is None:
        return None
    first = batch.first_line
    for rows in got:
        # the line as the per-row path keeps it (for the quarantine entry of a repeat)
        rows.raw = lambda i, ln=rows.lines: (raws[ln[i] - first] + b"\n").decode("utf-8")
    return got
