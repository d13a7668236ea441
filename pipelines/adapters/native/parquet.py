"""ddai's own Parquet read in columns: one record batch → ``RowBatch``es (one per run).

``normalize_rollout`` as polars expressions over a whole batch, for files in the log's own shape
(every column one of ``ROLLOUT_SCHEMA``'s, of its type: a store's export, another ddai's
partition). It takes a batch only when every row is one the per-row path would keep as is, and
returns None otherwise, so that batch goes through the per-row path. It declines a batch with:

- a column the log does not have (it would go to ``extra``) or of another type;
- a row the schema refuses or rewrites: no run, ``uid`` or ``rollout_idx``, a negative index, a
  non-finite score (flagged per row), a ``judge_score`` or ``ndcg`` out of its range
  (``schema.SCORE_RANGES``: quarantined per row), a null inside a string list, ``flags`` set, a turn with no
  ``idx``, ``forced`` or known ``action``, an unknown ``terminated``, an ``extra`` that is not a
  JSON object (``normalize_rollout`` wraps it), turns to parse from ``response`` (the tag parser
  runs per row) or ``retrieved_pages`` to derive from the turns.

Derived where missing: ``num_turns`` (the turn count), ``terminated`` and ``format_ok`` from the
turns, as ``normalize_rollout`` does. ``--run-id`` over a row's own differing run id adds
``extra.source_run_id``. Row content digests (duplicate checks) are hashes of the source row,
computed for every batch whichever path reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.line_batches import duck, from_turns, scores_in_range
from ddai.pipelines.adapters.unified.events import int_array
from ddai.pipelines.records.deps import duckdb, np, pa, pc, pl
from ddai.pipelines.records.schema import ACTION_NAMES, INT32_MAX, ROLLOUT_SCHEMA, TERMINATIONS
from ddai.pipelines.store import check_run_id

_FLOATS = ("judge_score", "ndcg", "reward", "advantage")
_INTS = ("step", "sample_idx", "num_turns")


def frame(batch: pa.RecordBatch) -> pl.DataFrame | None:
    """The batch as a polars frame (read once, for its digests and its checks), or None when
    polars does not take one of its Arrow types (the per-row path then reads the batch)."""
    try:
        return pl.from_arrow(pa.Table.from_batches([batch]))
    except Exception:  # an Arrow type polars does not take
        return None


def digests(df: pl.DataFrame) -> list[bytes] | None:
    """An 8-byte digest per row of the source batch (``frame``: one seeded row hash), or None
    when its types cannot be hashed (the per-row path then digests each row's JSON).

    Digests are compared only between rows of one run with the same (step, uid, rollout_idx)
    key (``row_checks``): a collision would quarantine a same-key row of other content as a
    repeat instead of flagging it. For the hash's random collisions, 64 bits put that at
    2^-64 (5e-20) per same-key pair; a second seed of the same hash (128 bits, as before) only
    guards against those, not against the function's own collisions (which repeat under any
    seed), and cost as much again (0.45 CPU s at 200k rollouts)."""
    try:
        h = df.hash_rows(seed=11).to_numpy()
    except Exception:  # a type polars cannot hash
        return None
    buf = np.ascontiguousarray(h, dtype="<u8").tobytes()
    return [buf[i : i + 8] for i in range(0, len(buf), 8)]


def _schema_ok(schema: pa.Schema) -> bool:
    want = {f.name: f.type for f in ROLLOUT_SCHEMA}
    return all(f.name in want and f.type == want[f.name] for f in schema) and {
        "uid",
        "rollout_idx",
    } <= set(schema.names)


def _extra(table: pa.Table, run_id: str | None) -> pa.ChunkedArray | None:
    """``extra`` as ``normalize_rollout`` leaves it: ``{}`` for none, a JSON object as written,
    ``source_run_id`` set where ``--run-id`` overrides the row's own; None when some ``extra`` is
    not a JSON object (the per-row path wraps it)."""
    # The JSON work runs once per distinct (extra, run id) pair, then is spread back over the
    # rows: a batch repeats few pairs (``{}``, one run), and the values stay DuckDB's own.
    pairs, at = _distinct_pairs(table["extra"], table["run_id"])
    con = duck()
    try:
        con.register("b", pairs)
        own = "coalesce(nullif(e, ''), '{}')"
        # a run id is a folder name (check_run_id): letters, digits and . _ - : + @, no quotes
        run = "NULL" if run_id is None else "'" + run_id.replace("'", "''") + "'"
        out = con.sql(
            f"SELECT CASE WHEN r IS NOT NULL AND r <> {run} THEN "
            f"json_merge_patch({own}, json_object('source_run_id', r))::VARCHAR ELSE {own} END "
            "AS e, e IS NOT NULL AND e <> '' "
            "AND coalesce(json_type(try_cast(e AS JSON)) <> 'OBJECT', true) AS bad FROM b"
        ).to_arrow_table()
    except duckdb.Error:
        return None
    finally:
        con.unregister("b")
    return None if pc.any(out["bad"]).as_py() else out["e"].take(at)


def _distinct_pairs(extra: pa.ChunkedArray, run: pa.ChunkedArray) -> tuple[pa.Table, pa.Array]:
    """The distinct (``e``: extra, ``r``: run id) pairs of the rows, nulls included, as a table
    of ``u`` rows, and for each of the ``n`` rows its pair's place in it (int64, shape (n,)).

    The codes are combined in numpy: no Python scalar reaches pyarrow, whose conversion of one
    imports pandas (0.3 CPU s of the command)."""
    codes = []
    values = []
    for col in (extra, run):
        d = pc.dictionary_encode(col.combine_chunks(), null_encoding="encode")  # null: a value
        values.append(d.dictionary)
        codes.append(_ints(d.indices))
    width = len(values[1])
    uniq, at = np.unique(codes[0] * width + codes[1], return_inverse=True)
    pairs = pa.table(
        {
            "e": values[0].take(int_array(uniq // width)),
            "r": values[1].take(int_array(uniq % width)),
        }
    )
    return pairs, int_array(at)


def _ints(arr: pa.Array) -> np.ndarray:
    """A null-free Arrow integer array's values as int64 (read off its buffer: ``to_numpy``
    imports pandas)."""
    raw = np.frombuffer(arr.buffers()[1], np.dtype(f"int{arr.type.bit_width}"))
    return raw[arr.offset : arr.offset + len(arr)].astype(np.int64)


def _rows_ok(df: pl.DataFrame, run_given: bool) -> bool:
    checks = [
        (pl.col("uid").str.len_bytes() > 0).fill_null(False).all(),
        pl.col("rollout_idx").is_between(0, INT32_MAX).fill_null(False).all(),
        *[(pl.col(c).is_null() | (pl.col(c) >= 0)).all() for c in _INTS],
        *[(pl.col(c).is_null() | pl.col(c).is_finite()).all() for c in _FLOATS],
        *scores_in_range(),
        pl.col("flags").is_null().all(),
        (pl.col("terminated").is_null() | pl.col("terminated").is_in(TERMINATIONS)).all(),
        # turns to parse, or pages to derive from turns: the per-row path
        (pl.col("turns").is_not_null() | pl.col("response").is_null()).all(),
    ]
    if not run_given:
        checks.append((pl.col("run_id").str.len_bytes() > 0).fill_null(False).all())
    turn = pl.col("turns").list
    checks.append(
        (
            pl.col("turns").is_null()
            | pl.col("retrieved_pages").is_not_null()
            | ~turn.eval(pl.element().struct.field("retrieved").list.len() > 0).list.any()
        ).all()
    )
    ok = bool(df.select(pl.all_horizontal(checks)).item())
    if not ok:
        return False
    t = df.select(pl.col("turns").explode().struct.unnest()).drop_nulls("action")
    turns_ok = t.select(
        pl.col("action").is_in(ACTION_NAMES).all()
        & pl.col("idx").is_not_null().all()
        & pl.col("forced").is_not_null().all()
        & (pl.col("value").is_null() | pl.col("value").is_finite()).all()
    ).item()
    n_turns = df.select(pl.col("turns").list.len().sum()).item() or 0
    return bool(turns_ok) and t.height == n_turns


def to_rows(
    batch: pa.RecordBatch,
    run_id: str | None,
    first_row: int,
    row_digests: list[bytes],
    df: pl.DataFrame | None = None,
) -> list[RowBatch] | None:
    """The batch's rollouts, one ``RowBatch`` per run, or None to read it per row. ``df``: the
    batch as ``frame`` read it (its checks reuse it instead of converting the batch again)."""
    if not _schema_ok(batch.schema):
        return None
    table = pa.Table.from_batches([batch])
    whole = len(table.column_names) == len(ROLLOUT_SCHEMA)  # (_schema_ok: no other column)
    for f in ROLLOUT_SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    table = table.select(ROLLOUT_SCHEMA.names)
    for c in ("reference_pages", "retrieved_pages"):
        if pc.list_flatten(table[c]).null_count:
            return None
    turns_retrieved = pc.list_flatten(pc.struct_field(pc.list_flatten(table["turns"]), "retrieved"))
    extra = _extra(table, run_id) if not turns_retrieved.null_count else None
    if extra is None:
        return None
    table = table.set_column(table.schema.get_field_index("extra"), "extra", extra)
    if df is None or not whole:  # (the checks and derivations below read no ``extra``)
        df = pl.from_arrow(table)
    if not _rows_ok(df, run_id is not None):
        return None
    out = _derive(table, df, run_id)
    d = pc.dictionary_encode(out["run_id"].combine_chunks())  # (no null: _rows_ok, run_id)
    runs = d.dictionary.to_pylist()
    try:
        for r in runs:
            check_run_id(r)
    except (ValueError, TypeError):
        return None
    if len(runs) == 1:  # the common case: the batch as it is
        lines = list(range(first_row, first_row + out.num_rows))
        return [RowBatch(out, runs[0], lines, list(row_digests), _raw(table))]
    codes = _ints(d.indices)
    batches = []
    for j, r in enumerate(runs):  # (in order of first appearance)
        idx = np.flatnonzero(codes == j)
        at = int_array(idx)
        rows = RowBatch(
            out.take(at),
            r,
            (idx + first_row).tolist(),
            [row_digests[i] for i in idx],
            _raw(table.take(at)),
        )
        batches.append(rows)
    return batches


def _derive(table: pa.Table, df: pl.DataFrame, run_id: str | None) -> pa.Table:
    """``table`` with ``num_turns``, ``terminated`` and ``format_ok`` derived where missing
    (from the turns, as ``normalize_rollout`` does) and ``run_id`` set to ``run_id`` when given.
    Only those columns go through polars and back (``df``: the same rows); the others are the
    source's Arrow arrays as they are (a round trip of every column through polars cost 0.8 CPU
    s at 200k rollouts)."""
    derived = {k: pl.coalesce(k, v) for k, v in from_turns(pl.col("turns")).items()}
    if run_id is not None:  # (a literal beside column expressions: one value per row)
        derived["run_id"] = pl.lit(run_id, pl.String)
    cols = df.select(**derived).to_arrow()
    for name in cols.column_names:
        i = ROLLOUT_SCHEMA.get_field_index(name)
        f = ROLLOUT_SCHEMA.field(i)
        table = table.set_column(i, f, cols[name].cast(f.type))
    return table.cast(ROLLOUT_SCHEMA)


def _raw(src_rows: pa.Table) -> Callable[[int], str]:
    """Row ``i`` of ``src_rows`` as the per-row path writes it (for the quarantine entry of a
    repeat)."""

    def raw(i: int) -> str:
        row = src_rows.slice(i, 1).to_pylist()[0]
        if isinstance(row.get("reward_parts"), list):  # as the per-row path reads it
            row["reward_parts"] = dict(row["reward_parts"])
        return json.dumps(row, default=str)

    return raw
