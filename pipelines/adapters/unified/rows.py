"""The rollouts one columnar batch of DDAI's unified log completed, as rows of the log.

``columns`` joins and checks the events; here each completed rollout becomes its row as
``assembler.Assembler`` builds it: tool results placed on their turns (a search shows its first
result not shown yet in the rollout, else the top one), the reward mapped in columns
(``rewards``: the scalar columns and ``extra``), then ``turns`` (from the plans' parsed
turn columns), ``response`` and the turn-derived columns set from columns. Content digests are
over the rollout's event lines, as the event-by-event reader computes them.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.line_batches import rollout_table
from ddai.pipelines.adapters.unified import events as du
from ddai.pipelines.adapters.unified.rewards import reward_frame
from ddai.pipelines.records.deps import np, pa, pl
from ddai.pipelines.records.schema import TURN_TYPE
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
    lines: pa.LargeStringArray,
    asm: Any,
    max_turns: dict[Any, int | None],
    data_source: dict[Any, str | None],
) -> tuple[list[RowBatch], Counter]:
    """The completed rollouts as rows, in the order they completed. ``plans`` holds each plan's
    parsed turn in columns (``turns.parse_plans``); ``texts`` and ``lines`` are the
    batch's lines (each with its newline) by ``pos``, as polars and as Arrow over the read
    bytes."""
    counts: Counter = Counter()
    if not len(done):
        return [], counts
    n = len(done)
    # turns of the completed rollouts, by rollout then turn, with the tool events placed on them
    t = plans.join(done.select("k", "o"), on="k")
    files = (
        pl.col("results")
        .list.eval(pl.element().struct.field("image_file"))
        .list.eval(pl.element().filter(pl.element().str.len_bytes() > 0))
    )
    resp = tools.filter(pl.col("event_type") == du.SEARCH_RESPONSE)
    failed = texts.gather(resp["pos"]).str.contains('"error"', literal=True)  # rare: read it
    resp = resp.select(
        "k",
        turn_idx="turn",
        files=files.fill_null([]),
        pages=files.list.eval(  # ddai_common.basename
            pl.element().str.replace(r"(?s)^.*/", "").str.replace(r"(?s)\.[^.]*$", "")
        ).fill_null([]),
        err_pos=pl.when(pl.lit(failed)).then(pl.col("pos")),
    )
    crops = tools.filter(pl.col("event_type") == du.BBOX).select(
        "k", turn_idx="turn", crop="crop_path", has_crop=pl.lit(True)
    )
    t = (
        t.join(resp, on=("k", "turn_idx"), how="left")
        .join(crops, on=("k", "turn_idx"), how="left")
        .sort("o", "turn_idx")
    )
    t, search_results, shown_pages, missing = _place_results(t, texts, n)
    if missing:
        counts["search turns without a response"] += missing

    # per rollout (each has a turn: ``t`` is sorted by ``o``): its last turn, and whether every
    # turn is valid (the format gate); positions from the turn counts, no group-by
    o = t["o"].to_numpy()
    sizes = np.bincount(o, minlength=n)
    last = np.cumsum(sizes) - 1
    invalid = t.select((pl.col("action") == "invalid").fill_null(False)).to_series().to_numpy()
    ends = t[["action", "forced"]][last].select(
        last_action="action",
        last_forced="forced",
        valid=pl.Series(np.bincount(o[invalid], minlength=n) == 0),
    )
    data, offsets = du.gathered(lines, done["reward_pos"].to_numpy())
    got = reward_frame(
        done,
        texts.gather(done["reward_pos"]),
        data[offsets[0] : offsets[-1]],
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
    built = {c: col.chunk(0) for c, col in zip(out.columns, _arrow(out).columns, strict=True)}
    built["turns"] = _turns_array(t, sizes)
    built["response"] = _arrow(done.select("response"))["response"].chunk(0)
    table = rollout_table(built, n)
    # content digests and source text, as the event-by-event reader makes them
    events = (
        members.join(done.select("k", "o", "close"), on="k")
        .filter(pl.col("line") <= pl.col("close"))
        .sort("o", "line")
    )
    digests = du.rollout_digests(lines, events["pos"].to_numpy(), events["o"].to_numpy())
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


def _place_results(
    t: pl.DataFrame, texts: pl.Series, n: int
) -> tuple[pl.DataFrame, pl.Series, pl.Series, int]:
    """Search results and crops on their turns, as the event-by-event reader places them.

    ``t``: the completed rollouts' turns sorted by rollout ``o`` then turn, with their search
    response's ``files`` / ``pages`` / ``err_pos`` and their crop joined. Returns ``t`` with each
    turn's ``retrieved``, ``observation`` and ``error`` set; per rollout (``o`` in 0..n-1) the
    basenames of each answered search (``search_results``) and the pages shown
    (``shown_pages``); and how many search turns had no response."""
    t = t.with_columns(i=pl.int_range(pl.len(), dtype=pl.Int64))
    search = pl.col("act") == "search"
    missing = t.select((search & pl.col("files").is_null()).sum()).item()
    answered = t.filter(search & pl.col("files").is_not_null()).select(
        "i", "o", "files", "pages", "err_pos"
    )
    # a search shows the first result its rollout has not shown yet, else its top one: a short
    # sequential pass over the answered searches only (what was shown depends on the turns before)
    shown_at: list[int | None] = []
    seen: set[str] = set()
    prev = -1
    for o, fs in zip(answered["o"].to_list(), answered["files"].to_list(), strict=True):
        if o != prev:
            seen, prev = set(), o
        at = 0 if fs else None
        for j, f in enumerate(fs):  # a plain loop: a generator per search cost more
            if f not in seen:
                at = j
                break
        if at is not None:
            seen.add(fs[at])
        shown_at.append(at)
    answered = answered.with_columns(at=pl.Series(shown_at, dtype=pl.Int64)).with_columns(
        page=pl.col("pages").list.get(pl.col("at"), null_on_oob=True),
        file=pl.col("files").list.get(pl.col("at"), null_on_oob=True),
    )
    # a failed search's error on its turn (when the parser found none): rare, read from its line
    failed = answered.filter(pl.col("err_pos").is_not_null())
    err_of = {
        i: json.loads(x).get("error")
        for i, x in zip(failed["i"].to_list(), texts_at(texts, failed["err_pos"]), strict=True)
    }
    err_of = {i: str(e) for i, e in err_of.items() if e}
    # placed by position (``scatter`` writes in place: one blank each)
    at_i = answered["i"]
    placed = {
        c: pl.repeat(None, len(t), dtype=pl.String, eager=True).alias(c).scatter(at_i, answered[c])
        for c in ("page", "file")
    }
    t = t.with_columns(**placed)
    search_error = (
        pl.col("i").replace_strict(err_of, default=None, return_dtype=pl.String)
        if err_of
        else pl.lit(None, pl.String)
    )
    t = t.with_columns(
        retrieved=pl.when(pl.col("page").is_not_null()).then(pl.concat_list("page")),
        observation=pl.when(search)
        .then(pl.col("file"))
        .when((pl.col("act") == "bbox") & pl.col("has_crop").fill_null(False))
        .then(pl.col("crop")),
        error=pl.coalesce("error", search_error),
    )
    # per rollout, its answered searches' pages and the pages shown: lists over offsets (the
    # answered searches are in rollout order), no group-by and join
    results = _lists(answered["pages"], answered["o"].to_numpy(), n, "search_results")
    shown_of = answered.select("o", "page").drop_nulls("page")
    shown = _lists(shown_of["page"], shown_of["o"].to_numpy(), n, "shown")
    return t, results, shown, missing


def _lists(values: pl.Series, owner: np.ndarray, n: int, name: str) -> pl.Series:
    """``values`` gathered into one list per owner 0..n-1 (``owner`` non-decreasing)."""
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n))]).astype(np.int64)
    arr = _arrow(values.to_frame())[0].combine_chunks()
    lists = pa.LargeListArray.from_arrays(du.int_array(offsets), arr)
    out = pl.from_arrow(lists)
    assert isinstance(out, pl.Series)
    return out.alias(name)


def _arrow(df: pl.DataFrame) -> pa.Table:
    """``df`` as Arrow in one chunk per column, strings as Arrow's classic (offset) layout: 5x
    cheaper than converting polars' string views, and what the rollout schema casts to anyway."""
    return df.rechunk().to_arrow(compat_level=pl.CompatLevel.oldest())


def _turns_array(t: pl.DataFrame, sizes: np.ndarray) -> pa.Array:
    """The ``turns`` column: one list of turn structs per completed rollout (``sizes``: each
    rollout's number of turns, in the order of ``t``)."""
    # each field as TURN_TYPE types it; ``value`` (``ddai value score``'s) is never in the log
    logged = [f.name for f in TURN_TYPE if f.name != "value"]
    cols = _arrow(t.rename({"turn_idx": "idx"}).select(logged))
    arrays = [
        cols[f.name].combine_chunks().cast(f.type) if f.name in logged else pa.nulls(len(t), f.type)
        for f in TURN_TYPE
    ]
    structs = pa.StructArray.from_arrays(arrays, fields=list(TURN_TYPE))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(
        du.int_array(offsets, np.int32), structs, type=pa.list_(TURN_TYPE)
    )
