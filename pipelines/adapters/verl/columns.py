"""verl rollout dumps read in columns: one clean ``LineBatch`` → one ``RowBatch``.

Arrow's JSON reader parses the batch with verl's own fields typed (``input``, ``output``, ``gts``
and ``data_source`` strings, ``score``, ``judge_score`` and ``ndcg`` numbers, ``step`` an
integer), so a value of another type or a key given twice makes it refuse the batch. Every other
field goes to ``extra`` as DuckDB reads it from the line (its JSON text as written: objects,
``1`` against ``1.0`` and null against absent kept), under ``source_<name>`` when it is named like
a log column. The group id (sha1 of ``input``, or the dataset id through ``ids.UidMapper``)
and the question are computed once per distinct prompt; ``rollout_idx`` is the row's order within
(``step``, ``uid``) over the whole file (``order``, shared with the per-row path). The transcript
(``output``) is cut into the policy's text, turns and observations by ``transcripts`` (in
columns where the text has the usual shape, else by ``split_transcript``), which also derives
``num_turns``, ``retrieved_pages``, ``terminated`` and ``format_ok`` as ``normalize_rollout`` does.

It returns None (and the reader reads the batch row by row, quarantining or converting each line
exactly as before) for a batch the parser refuses, a row without a string ``input``, a ``step``
negative or past int32, a non-finite score, a ``judge_score`` or ``ndcg`` out of its range
(``schema.SCORE_RANGES``), a field named ``source_*`` (it could collide with a
renamed one) or a key DuckDB cannot address, and, with a uid mapping, a ``--uid-field`` that is a
dotted path or holds numbers that are not integers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.ddai_common import question_from_prompt
from ddai.pipelines.adapters.line_batches import (
    LineBatch,
    duck,
    json_object,
    read_json,
    rollout_table,
    scores_in_range,
)
from ddai.pipelines.adapters.verl.ids import UID_UNMATCHED, UidMapper, uid_of
from ddai.pipelines.adapters.verl.transcripts import transcripts
from ddai.pipelines.records.deps import duckdb, pa, pj, pl
from ddai.pipelines.records.schema import COLUMNS, INT32_MAX

_STRING = ("input", "output", "gts", "data_source")
_FLOAT = ("score", "judge_score", "ndcg")
KNOWN_SCHEMA = pa.schema(
    [(c, pa.string()) for c in _STRING]
    + [(c, pa.float64()) for c in _FLOAT]
    + [("step", pa.int64())]
)
_PARSE = pj.ParseOptions(explicit_schema=KNOWN_SCHEMA, unexpected_field_behavior="infer")
# A key quoted into a DuckDB JSON path: no quote, backslash or control character.
_SAFE_KEY = r'^[^"\\\x00-\x1f]+$'


def _extra_key(name: str) -> str:
    """The key a dump field has in ``extra`` (``rows.verl_rollout``: a column name → source_)."""
    return f"source_{name}" if name in COLUMNS else name


def _field_texts(lines: pa.LargeStringArray, names: list[str]) -> pl.DataFrame | None:
    """Per line, each named field's JSON text as written (null where the line lacks it)."""
    con = duck()
    try:
        con.register("b", pa.table({"l": lines}))
        paths = "[" + ", ".join(f"'$.\"{n}\"'" for n in names) + "]"
        got = con.sql(f"SELECT json_extract(l, {paths})::VARCHAR[] AS x FROM b").to_arrow_table()
    except duckdb.Error:
        return None
    finally:
        con.unregister("b")
    df = pl.from_arrow(got)
    assert isinstance(df, pl.DataFrame)
    return df.select(pl.col("x").list.get(i).alias(n) for i, n in enumerate(names))


def _extra(texts: pl.DataFrame, output_kept: pl.Series) -> pl.Series:
    """``extra`` as JSON text, keys sorted: ``input``, ``output`` where ``output_kept``, and every
    other field the line names (as written)."""
    parts = []
    for name in sorted(texts.columns, key=_extra_key):
        frag = pl.lit(f'"{_extra_key(name)}":') + pl.col(name)
        if name == "output":  # the per-row path keeps it for a cut transcript or a null one
            frag = pl.when(pl.lit(output_kept)).then(
                pl.lit('"output":') + pl.col(name).fill_null("null")
            )
        parts.append(frag)
    return texts.select(json_object(parts)).to_series()


def _uids(df: pl.DataFrame, mapper: UidMapper | None) -> tuple[pl.Series, list, Counter] | None:
    """Per row: uid, flags, and the mapping counts to add; None to decline the batch."""
    own_uid = _per_prompt(df["input"], uid_of)
    if mapper is None:
        return own_uid, [None] * df.height, Counter()
    field = mapper.uid_field
    if field and "." in field:  # a path into nested objects: the per-row path reads it
        return None
    values: list[Any] = [None] * df.height
    if field and field in df.columns:
        col = df[field]
        if col.dtype not in (pl.String, pl.Int64, pl.Boolean, pl.Null):
            return None  # a float column may hold integers written as 1: Arrow made them 1.0
        values = col.to_list()
    mapped, counts = mapper.uid_batch(df["input"].to_list(), values)
    uid = [m if m is not None else o for m, o in zip(mapped, own_uid.to_list(), strict=True)]
    flags = [None if m is not None else [UID_UNMATCHED] for m in mapped]
    return pl.Series(uid, dtype=pl.String), flags, counts


def to_rows(
    batch: LineBatch, run_id: str, order: Counter, mapper: UidMapper | None = None
) -> RowBatch | None:
    """The batch's rollouts, or None to read it per row. ``order`` ((step, uid) → rows seen) and
    ``mapper``'s counts are updated only when the batch is taken."""
    lines = batch.lines()
    n = len(lines)
    parsed = read_json(batch.data, _PARSE, n)
    if parsed is None:
        return None
    others = [c for c in parsed.column_names if c not in KNOWN_SCHEMA.names]
    if any(c.startswith("source_") for c in others):
        return None
    df = pl.from_arrow(parsed)
    assert isinstance(df, pl.DataFrame)
    ok = df.select(
        pl.col("input").is_not_null().all()
        & (pl.col("step").is_null() | pl.col("step").is_between(0, INT32_MAX)).all()
        & pl.all_horizontal((pl.col(c).is_null() | pl.col(c).is_finite()).all() for c in _FLOAT)
        & pl.all_horizontal(scores_in_range())
    ).item()
    if not ok:
        return None
    extra_fields = ["input", "output", *others]
    if not all(pl.Series(others, dtype=pl.String).str.contains(_SAFE_KEY)):
        return None
    texts = _field_texts(lines, extra_fields)
    if texts is None:
        return None
    got = _uids(df, mapper)
    if got is None:
        return None
    uid, flags, counts = got
    tr = transcripts(df["output"])

    # rollout_idx: the order within (step, uid), after the rows of earlier batches
    keyed = pl.DataFrame({"s": df["step"].fill_null(-1), "u": uid})
    groups = keyed.group_by("s", "u", maintain_order=True).len()
    keys = [(None if s < 0 else s, u) for s, u in groups.select("s", "u").iter_rows()]
    groups = groups.with_columns(b=pl.Series([order[k] for k in keys], dtype=pl.Int64))
    rollout_idx = (
        keyed.join(groups, on=["s", "u"], how="left", maintain_order="left")
        .select(pl.int_range(pl.len()).over("s", "u") + pl.col("b"))
        .to_series()
    )

    cols = {
        "run_id": pa.array([run_id] * n, pa.string()),
        "step": df["step"].cast(pl.Int32).to_arrow(),
        "uid": uid.to_arrow(),
        "rollout_idx": rollout_idx.to_arrow(),
        "data_source": df["data_source"].to_arrow(),
        "question": _per_prompt(df["input"], question_from_prompt).to_arrow(),
        "reference_answer": df["gts"].to_arrow(),
        "response": tr["response"].to_arrow(),
        "turns": tr["turns"].to_arrow(),
        "retrieved_pages": tr["retrieved_pages"].to_arrow(),
        "judge_score": df["judge_score"].to_arrow(),
        "ndcg": df["ndcg"].to_arrow(),
        "format_ok": tr["format_ok"].to_arrow(),
        "reward": df["score"].to_arrow(),
        "num_turns": tr["num_turns"].to_arrow(),
        "terminated": tr["terminated"].to_arrow(),
        "extra": _extra(texts, tr["output_kept"]).to_arrow(),
        "flags": pa.array(flags, pa.list_(pa.string())),
    }
    table = rollout_table(cols, n)
    # taken: the file's group counts and the mapping's counts move on
    order.update(dict(zip(keys, groups["len"].to_list(), strict=True)))
    if mapper is not None:
        mapper.counts.update(counts)
    return batch.row_batch(table, run_id)


def _per_prompt(prompts: pl.Series, fn: Callable[[str], str | None]) -> pl.Series:
    """``fn`` of each row's prompt, called once per distinct prompt."""
    uniq = prompts.unique()
    got = pl.Series([fn(p) for p in uniq.to_list()], dtype=pl.String)
    return prompts.replace_strict(uniq, got, return_dtype=pl.String)
