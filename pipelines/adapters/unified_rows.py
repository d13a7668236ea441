"""The rollouts one columnar batch of DDAI's unified log completed, as rows of the log.

``unified_columns`` joins and checks the events; here each completed rollout becomes its row as
``ddai_unified._Assembler`` builds it: tool results placed on their turns (a search shows its first
result not shown yet in the rollout, else the top one), the reward mapped in columns
(``unified_rewards``: the scalar columns and ``extra``), then ``turns`` (from the plans' parsed
turn columns), ``response`` and the turn-derived columns set from columns. Content digests are
over the rollout's event lines, as the event-by-event reader computes them.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ddai.pipelines.adapters import unified_events as du
from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.unified_rewards import reward_frame
from ddai.pipelines.schema import ROLLOUT_SCHEMA, TURN_TYPE
from ddai.pipelines.store import check_run_id

KEY = ("run_id", "global_step", "sample_idx")


class Decline(Exception):
    """The batch goes event by event."""


def texts_at(texts: pl.Series, pos: pl.Series | list[int]) -> list[str]:
    """The lines at ``pos``, without their newlines."""
    return texts.gather(pos).str.strip_suffix("\n").to_list()


def rows(
    done: pl.DataFrame,
    members: pl.DataFrame,
    plans: pl.DataFrame,
    tools: pl.DataFrame,
    texts: pl.Series,
    asm: Any,
    max_turns: dict[Any, int | None],
    data_source: dict[Any, str | None],
) -> tuple[list[RowBatch], Counter]:
    """The completed rollouts as rows, in the order they completed. ``plans`` holds each plan's
    parsed turn in columns (``turn_columns.parse_plans``)."""
    counts: Counter = Counter()
    if not len(done):
        return [], counts
    n = len(done)
    # turns of the completed rollouts, by rollout then turn, with the tool events placed on them
    t = plans.join(done.select(*KEY, "o"), on=KEY)
    files = (
        pl.col("results")
        .list.eval(pl.element().struct.field("image_file"))
        .list.eval(pl.element().filter(pl.element().str.len_bytes() > 0))
    )
    resp = tools.filter(pl.col("event_type") == du.SEARCH_RESPONSE)
    failed = texts.gather(resp["pos"]).str.contains('"error"', literal=True)  # rare: read it
    resp = resp.select(
        *KEY,
        turn_idx="turn",
        files=files.fill_null([]),
        pages=files.list.eval(  # ddai_common.basename
            pl.element().str.replace(r"(?s)^.*/", "").str.replace(r"(?s)\.[^.]*$", "")
        ).fill_null([]),
        err_pos=pl.when(pl.lit(failed)).then(pl.col("pos")),
    )
    crops = tools.filter(pl.col("event_type") == du.BBOX).select(
        *KEY, turn_idx="turn", crop="crop_path", has_crop=pl.lit(True)
    )
    t = (
        t.join(resp, on=(*KEY, "turn_idx"), how="left")
        .join(crops, on=(*KEY, "turn_idx"), how="left")
        .sort("o", "turn_idx")
    )
    retrieved: list[list[str] | None] = [None] * len(t)
    observation: list[str | None] = [None] * len(t)
    errors = t["error"].to_list()
    search_results: list[list[list[str]]] = [[] for _ in range(n)]
    shown_pages: list[list[str]] = [[] for _ in range(n)]
    err_at = [p for p in t["err_pos"].to_list() if p is not None]
    err_of = {
        p: json.loads(x).get("error") for p, x in zip(err_at, texts_at(texts, err_at), strict=True)
    }
    # per rollout in order: search turns show the first result not shown yet, else the top one
    seen: set[str] = set()
    prev = -1
    cols = (t[c].to_list() for c in ("o", "act", "files", "pages", "err_pos", "crop", "has_crop"))
    for i, (o, a, fs, pages, err_pos, crop, has_crop) in enumerate(zip(*cols, strict=True)):
        if o != prev:
            seen, prev = set(), o
        if a == "search":
            if fs is None:
                counts["search turns without a response"] += 1
                continue
            search_results[o].append(pages)
            at = next((j for j, f in enumerate(fs) if f not in seen), 0 if fs else None)
            if at is not None:
                seen.add(fs[at])
                retrieved[i] = [pages[at]]
                observation[i] = fs[at]
                shown_pages[o].append(pages[at])
            if err_pos is not None and err_of[err_pos] and errors[i] is None:
                errors[i] = str(err_of[err_pos])
        elif a == "bbox" and has_crop:
            observation[i] = crop

    # per rollout: its last turn, and whether every turn is valid (the format gate)
    ends = t.group_by("o", maintain_order=True).agg(
        last_action=pl.col("action").last(),
        last_forced=pl.col("forced").last(),
        valid=(pl.col("action") != "invalid").all(),
    )
    got = reward_frame(
        done,
        texts.gather(done["reward_pos"]),
        asm.ctx.run_id,
        max_turns,
        data_source,
        search_results,
        shown_pages,
    )
    if got is None:
        raise Decline
    scalars, reward_counts = got
    counts.update(reward_counts)
    complete = pl.col("last_action") == "search_complete"
    mt = pl.Series(
        [max_turns.get(r) for r in done["run_id"].to_list()], dtype=pl.Int64
    )  # tags.terminated_from
    turn_cols = ends.select(
        num_turns=done["n_turns"].cast(pl.Int32),
        terminated=pl.when(complete)
        .then(
            pl.when(pl.col("last_forced")).then(pl.lit("max_turns")).otherwise(pl.lit("complete"))
        )
        .when(pl.lit(mt).is_not_null() & (pl.lit(done["n_turns"]) >= pl.lit(mt)))
        .then(pl.lit("max_turns"))
        .otherwise(pl.lit("invalid")),
        format_ok=pl.col("valid") & complete,
    )
    out = pl.concat([scalars, turn_cols], how="horizontal")
    try:
        for run in out["run_id"].unique().to_list():
            check_run_id(run)
    except ValueError as e:
        raise Decline from e
    counts["rollouts assembled"] += n
    built = {c: out[c].to_arrow() for c in out.columns}
    built["turns"] = _turns_array(t, retrieved, observation, errors)
    built["response"] = done["response"].to_arrow()
    table = pa.table(
        {
            f.name: built[f.name].cast(f.type) if f.name in built else pa.nulls(n, f.type)
            for f in ROLLOUT_SCHEMA
        },
        schema=ROLLOUT_SCHEMA,
    )
    # content digests and source text, as the event-by-event reader makes them
    events = (
        members.join(done.select(*KEY, "o", "close"), on=KEY)
        .filter(pl.col("line") <= pl.col("close"))
        .sort("o", "line")
    )
    joined = (
        events.with_columns(text=texts.gather(events["pos"]))
        .group_by("o", maintain_order=True)
        .agg(pl.col("text").str.join(""))
    )
    digests = [du.rollout_digest_of(s) for s in joined["text"].to_list()]
    keys = list(done.select(KEY).iter_rows())

    def raw(i: int) -> str:
        lines = texts_at(texts, events.filter(pl.col("o") == i)["pos"])
        return du.rollout_raw(keys[i], [json.loads(x) for x in lines])

    line_nos = done["reward_line"].to_list()
    runs = out["run_id"].to_list()
    batches = []
    for run in dict.fromkeys(runs):
        idx = [i for i, r in enumerate(runs) if r == run]
        sub = table.take(idx) if len(idx) < n else table
        batches.append(
            RowBatch(
                sub,
                run,
                [line_nos[i] for i in idx],
                [digests[i] for i in idx],
                (lambda ix: lambda j: raw(ix[j]))(idx),
            )
        )
    return batches, counts


def _turns_array(
    t: pl.DataFrame,
    retrieved: list,
    observation: list,
    errors: list,
) -> pa.Array:
    """The ``turns`` column: one list of turn structs per completed rollout."""
    cols = t.select("turn_idx", "think", "action", "arg", "sep", "forced").to_arrow()
    fields = {
        "idx": cols["turn_idx"].combine_chunks().cast(pa.int32()),
        **{
            c: cols[c].combine_chunks().cast(pa.string()) for c in ("think", "action", "arg", "sep")
        },
        "forced": cols["forced"].combine_chunks(),
        "retrieved": pa.array(retrieved, pa.list_(pa.string())),
        "observation": pa.array(observation, pa.string()),
        "error": pa.array(errors, pa.string()),
        "value": pa.nulls(len(t), pa.float64()),
    }
    structs = pa.StructArray.from_arrays(list(fields.values()), fields=list(TURN_TYPE))
    sizes = t.group_by("o", maintain_order=True).len().sort("o")["len"].to_numpy()
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=pa.list_(TURN_TYPE))
