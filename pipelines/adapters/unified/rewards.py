"""The rewards of the rollouts one columnar batch of DDAI's unified log completed, mapped in
columns: what ``rows`` did per rollout with ``flash_rollout`` and ``normalize_rollout``.

The reward lines are parsed by Arrow's JSON reader (the payload's known fields typed, as
``flash.columns`` reads the flash log), and the scalar columns and ``extra`` are polars
expressions over them. ``extra`` holds every reward field but the flash fields and the event's
key (``run_id``, ``global_step``, ``event_type``), plus what the event-by-event reader adds:
``search_results``, ``max_turns``, ``reward_uid`` / ``local_idx`` where they differ, and
``source_run_id`` under ``--run-id``. It returns None (the batch goes event by event) for a
reward the parser refuses (a known field of another type), a field the per-row mapping renames
or that would collide with what it adds, an object field, or a row the schema would refuse or
flag (no uid, a negative or past-int32 index, a non-finite score, a ``judge_score`` or ``ndcg``
out of its range).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ddai.pipelines.adapters.flash import columns as fc
from ddai.pipelines.adapters.line_batches import json_object, read_json, scores_in_range
from ddai.pipelines.records.deps import pa, pc, pj, pl
from ddai.pipelines.records.schema import COLUMNS, INT32_MAX

# The event's key and type: not part of the payload, not kept in ``extra``.
_DROP = ("run_id", "global_step", "event_type")
# Fields the event-by-event reader adds to ``extra`` itself; a reward naming one goes by events.
_ADDED = frozenset({"search_results", "max_turns", "reward_uid", "source_run_id", "nonfinite"})
_SCHEMA = pa.schema([*fc.KNOWN_SCHEMA, ("n_agent", pa.int64())])
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="infer")


def reward_frame(
    done: pl.DataFrame,
    reward_lines: pl.Series,
    reward_data: memoryview,
    run_id: str | None,
    max_turns: dict[Any, int | None],
    data_source: dict[Any, str | None],
    search_results: pl.Series,
    shown_pages: pl.Series,
) -> tuple[pl.DataFrame, Counter] | None:
    """One row per completed rollout (``done``'s order): the rollout columns the reward and the
    key give, ``extra`` as JSON text; and the reader's counts. ``reward_lines``: the reward
    lines (each with its newline), ``reward_data`` the same as one run of bytes. None: the batch
    goes event by event."""
    parsed = read_json(reward_data, _PARSE, len(done))
    if parsed is None or set(parsed.schema.names) & _ADDED:
        return None
    parsed = parsed.drop_columns([c for c in _DROP if c in parsed.schema.names])
    if not fc._schema_ok(parsed.schema):
        return None
    if any(pc.list_flatten(parsed[c]).null_count for c in fc._PAGES):
        return None
    r = pl.from_arrow(parsed)
    assert isinstance(r, pl.DataFrame)
    runs = done["run_id"]
    df = r.with_columns(
        _run=runs,
        _step=done["global_step"],
        _sidx=done["sample_idx"],
        _plan_uid=done["uid"],
        _uids=done["uids"],
        _mt=_per_run(runs, max_turns, pl.Int64),
        _ds=_per_run(runs, data_source, pl.String),
        _shown=shown_pages,
        search_results=search_results,
    )
    n_agent = pl.col("n_agent")
    has_agents = (n_agent.is_not_null() & (n_agent != 0)).fill_null(False)
    prompt_of = pl.col("_plan_uid") + "-" + (pl.col("_sidx") // n_agent).cast(pl.String)
    differs = (
        pl.col("_plan_uid").is_not_null()
        & pl.col("uid").is_not_null()
        & (pl.col("uid") != pl.col("_plan_uid"))
        & ~(has_agents & (pl.col("uid") == prompt_of)).fill_null(False)
    ).fill_null(False)
    rollout_idx = pl.when(has_agents).then(pl.col("_sidx") % n_agent).otherwise(pl.col("local_idx"))
    local_differs = (
        has_agents & pl.col("local_idx").is_not_null() & (pl.col("local_idx") != rollout_idx)
    ).fill_null(False)
    df = df.with_columns(
        _differs=differs,
        _local_differs=local_differs,
        _rollout_idx=rollout_idx,
        _uid=pl.coalesce("_plan_uid", "uid"),
        _run_out=pl.lit(run_id, pl.String) if run_id is not None else pl.col("_run"),
    )
    checks = df.select(
        (pl.col("_uid").str.len_bytes() > 0).fill_null(False).all(),
        (n_agent.is_null() | (n_agent >= 0)).all(),
        pl.col("_rollout_idx").is_between(0, INT32_MAX).fill_null(False).all(),
        pl.col("_step").is_between(0, INT32_MAX).fill_null(False).all(),
        pl.col("_sidx").is_between(0, INT32_MAX).fill_null(False).all(),
        *[(pl.col(c).is_null() | pl.col(c).is_finite()).all() for c in fc._FLOAT],
        *scores_in_range(),
    ).row(0)
    if not all(checks):
        return None
    counts: Counter = Counter()
    counts["reward uid differs from plan uid"] = int(df["_differs"].sum())
    counts["plan uids differ within a rollout"] = int((df["_uids"] > 1).sum())
    counts["local_idx differs from sample_idx mod n_agent"] = int(df["_local_differs"].sum())
    counts = +counts  # only those that occurred, as the per-rollout counter kept them
    # the fields kept in ``extra``: the payload's unknown ones and the reader's own
    extra_cols = [c for c in r.columns if c not in fc.KNOWN]
    added = {
        "search_results": pl.col("search_results"),
        "max_turns": pl.col("_mt"),
        "reward_uid": pl.when(pl.col("_differs")).then(pl.col("uid")),
        "local_idx": pl.when(pl.col("_local_differs")).then(pl.col("local_idx")),
        "source_run_id": (
            pl.when(pl.col("_run") != pl.lit(run_id)).then(pl.col("_run"))
            if run_id is not None
            else pl.lit(None, pl.String)
        ),
    }
    parts = []
    for c in sorted([*extra_cols, *added]):
        if c in added:
            # added only where it applies (``max_turns`` where the run's config names it)
            frag = pl.struct(added[c].alias(c)).struct.json_encode().str.slice(1)
            parts.append(pl.when(added[c].is_not_null()).then(frag.str.strip_suffix("}")))
        else:
            parts.append(fc.field_json(df, c, reward_lines))
    shown = pl.col("_shown").list.unique(maintain_order=True)
    out = df.select(
        run_id="_run_out",
        uid="_uid",
        rollout_idx=pl.col("_rollout_idx").cast(pl.Int32),
        step=pl.col("_step").cast(pl.Int32),
        sample_idx=pl.col("_sidx").cast(pl.Int32),
        data_source="_ds",
        retrieved_pages=pl.coalesce(
            "retrieved_basenames", pl.when(pl.col("_shown").list.len() > 0).then(shown)
        ),
        extra=json_object(parts),
        **fc.mapped(),
    )
    assert set(out.columns) <= set(COLUMNS)
    return out, counts


def _per_run(runs: pl.Series, values: dict[Any, Any], dtype: pl.DataType) -> pl.Series:
    """Each row's run's value (null for a run without one)."""
    known = {k: v for k, v in values.items() if isinstance(k, str) and v is not None}
    if not known:
        return pl.Series(runs.name, [None] * len(runs), dtype=dtype)
    return runs.replace_strict(known, default=None, return_dtype=dtype)
