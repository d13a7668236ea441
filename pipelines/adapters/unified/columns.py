"""DDAI's unified log read in columns: one clean ``LineBatch`` (plus the event lines of rollouts
still in flight from the batch before) → rollout rows as Arrow.

The batch is parsed by Arrow's JSON reader (the fields the join reads typed, so a value of
another type or a key given twice makes it refuse the batch); the event join is a polars
group-by over (``run_id``, ``global_step``, ``sample_idx``). A rollout whose events are not all
in yet is carried to the next batch as its event lines, so memory stays bounded by the rollouts
in flight. Plan texts are cut in columns (``turns``); the completed rollouts become rows
in ``rows``.

It takes a batch only when every rollout it completes is one the event-by-event reader
(``assembler.Assembler``) completes the same way, at the same event (its own last turn with
the reward in, or a newer step of its run, ``HORIZON``); otherwise it returns None and that batch
goes event by event, with the same rollouts, quarantine and notes. It declines a batch holding:

- a line Arrow refuses, one without a string ``event_type``, a rollout event without
  ``run_id`` / ``global_step`` / ``sample_idx``, a plan without ``turn_idx``;
- a rollout whose plans are not logged in turn order from 0 (a gap, a repeat, out of order),
  whose turn before the last ends it, with two rewards, or with an event after the one that
  completed it (padding aside);
- a tool event that does not fit the turn logged just before it (the event-by-event reader's
  fallback placement);
- a rollout a newer step closes without its reward (quarantined or kept with null scores);
- a ``run.start`` after an event of its run; a row the schema refuses or flags.
"""

from __future__ import annotations

import json
from typing import Any

from ddai.pipelines.adapters import line_batches
from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.line_batches import LineBatch
from ddai.pipelines.adapters.side import keep_line
from ddai.pipelines.adapters.unified import events as du
from ddai.pipelines.adapters.unified import turns
from ddai.pipelines.adapters.unified.rows import KEY, Decline, texts_at
from ddai.pipelines.adapters.unified.rows import rows as completed_rows
from ddai.pipelines.records.deps import np, pa, pj, pl

# The fields the join reads; the reward's other fields are read from its line.
EVENT_SCHEMA = pa.schema(
    [
        ("event_type", pa.string()),
        ("run_id", pa.string()),
        ("global_step", pa.int64()),
        ("sample_idx", pa.int64()),
        ("turn_idx", pa.int64()),
        ("uid", pa.string()),
        ("text", pa.string()),
        ("is_last_turn", pa.bool_()),
        ("final_rollout", pa.bool_()),
        ("results", pa.list_(pa.struct([("image_file", pa.string())]))),
        ("crop_path", pa.string()),
    ]
)
_PARSE = pj.ParseOptions(explicit_schema=EVENT_SCHEMA, unexpected_field_behavior="ignore")
_KIND = {du.SEARCH_RESPONSE: "search", du.BBOX: "bbox"}
_BIG = 2**62


def read_batch(
    batch: LineBatch, carry: list[tuple[int, str]], asm: Any
) -> tuple[list[RowBatch], list[tuple[int, str]]] | None:
    """The batch's completed rollouts (one ``RowBatch`` per run) and the event lines of those
    still in flight, or None to read the batch event by event. ``asm`` is the event-by-event
    assembler (``assembler.Assembler``): its state (newest steps, run configs, counts, side
    tables) follows an accepted batch and is left untouched by a declined one."""
    try:
        return _read(batch, carry, asm)
    except Decline:
        return None


def _read(
    batch: LineBatch, carry: list[tuple[int, str]], asm: Any
) -> tuple[list[RowBatch], list[tuple[int, str]]]:
    head = "".join(t + "\n" for _, t in carry).encode("utf-8")
    buf = head + batch.data
    # each line's text with its newline: one Arrow array over the parsed bytes (no copy)
    ends = np.concatenate([line_batches.newlines(head), batch.ends + len(head)])
    parsed = line_batches.read_json(buf, _PARSE, len(ends))
    if parsed is None:
        raise Decline
    lines_arr = pa.LargeStringArray.from_buffers(
        len(ends), pa.py_buffer(np.concatenate([[0], ends + 1])), pa.py_buffer(buf)
    )
    texts = pl.from_arrow(lines_arr).cast(pl.String)
    assert isinstance(texts, pl.Series)
    n_new = len(texts) - len(carry)
    lines = np.concatenate(
        [np.array([ln for ln, _ in carry], np.int64), np.arange(n_new) + batch.first_line]
    )
    ev = pl.from_arrow(parsed).with_columns(
        line=pl.Series(lines), pos=pl.int_range(pl.len(), dtype=pl.Int64)
    )
    if ev["event_type"].null_count():
        raise Decline
    is_roll = pl.col("event_type").is_in(du.ROLLOUT_EVENTS)
    rest = ev.filter(~is_roll).select("pos", "event_type", "run_id", "line")
    roll = ev.filter(is_roll)
    if roll.select(pl.any_horizontal(pl.col(*KEY).is_null().any())).item():
        raise Decline
    roll = roll.with_columns(k=_rollout_key(roll))
    plan = pl.col("event_type") == du.PLAN
    if roll.filter(plan)["turn_idx"].null_count():
        raise Decline

    # run.start: before any event of its run here (the rows read its max_turns / data_source)
    starts = [
        json.loads(x)
        for x in texts_at(texts, rest.filter(pl.col("event_type") == "run.start")["pos"])
    ]
    max_turns, data_source = dict(asm.max_turns), dict(asm.data_source)
    first_of_run = (
        dict(roll.group_by("run_id").agg(pl.col("line").min()).iter_rows()) if starts else {}
    )
    for line, ev_start in zip(
        rest.filter(pl.col("event_type") == "run.start")["line"], starts, strict=True
    ):
        run = ev_start.get("run_id")
        if run in first_of_run and first_of_run[run] < line:
            raise Decline
        _, max_turns[run], data_source[run] = du.run_config(ev_start)

    empty = plan & (pl.col("text").is_null() | (pl.col("text") == ""))
    full = roll.filter(~empty)
    pads = roll.filter(empty)
    plans = full.filter(plan)  # in line order, as the events are
    plans = plans.hstack(turns.parse_plans(plans["text"])).with_columns(
        ends=(
            (pl.col("is_last_turn") == True)  # noqa: E712 - null is not True
            | (pl.col("final_rollout") == True)  # noqa: E712
            | (pl.col("act") == "search_complete")
        ).fill_null(False),
    )
    # plans logged in turn order from 0, each once; only the last may end the rollout
    if not plans.select(
        (pl.col("turn_idx") == pl.int_range(pl.len(), dtype=pl.Int64).over("k")).all()
        & (~pl.col("ends") | (pl.col("turn_idx") == pl.col("turn_idx").max().over("k"))).all()
    ).item():
        raise Decline

    # per rollout, with its reward (``n_reward`` null where none) in the same group-by
    is_reward = pl.col("event_type") == du.REWARD
    keys = full.group_by(KEY).agg(
        k=pl.col("k").first(),
        first=pl.col("line").min(),
        n_reward=is_reward.sum(),
        reward_line=pl.col("line").filter(is_reward).first(),
        reward_pos=pl.col("pos").filter(is_reward).first(),
    )
    if len(keys) and keys["n_reward"].max() > 1:
        raise Decline
    keys = keys.with_columns(n_reward=pl.col("n_reward").replace(0, None))
    pk = plans.group_by("k").agg(
        n_turns=pl.len(),
        last_line=pl.col("line").max(),
        ends=pl.col("ends").last(),
        uid=pl.col("uid").first(),
        uids=pl.col("uid").n_unique(),
        response=pl.col("text").str.join(""),
    )
    keys = keys.join(pk, on="k", how="left")
    # completed by its own events: the reward in and the last turn ending it
    keys = keys.with_columns(
        flush=pl.when(pl.col("n_reward").is_not_null() & pl.col("ends").fill_null(False))
        .then(pl.max_horizontal("last_line", "reward_line"))
        .otherwise(_BIG)
    )
    # or closed by its run's newer steps first (the assembler's HORIZON), at that event
    keys, final = _horizon(keys, roll, asm)
    keys = keys.with_columns(
        closed_by_step=pl.col("horizon") < pl.col("flush"),
        close=pl.min_horizontal("flush", "horizon"),
    ).with_columns(done=pl.col("close") < _BIG)
    # a rollout closed by a newer step is kept as is only with its reward and its turns (the rest
    # is the assembler's: quarantined, or kept with null scores)
    lacking = pl.col("n_reward").is_null() | pl.col("n_turns").is_null()
    if keys.select((pl.col("closed_by_step") & lacking).any()).item():
        raise Decline

    # nothing but padding after the event that completed the rollout
    full = full.join(keys.select("k", "first", "close"), on="k")
    if full.select((pl.col("line") > pl.col("close")).any()).item():
        raise Decline

    # tool events: on the turn logged just before them, of their kind, one each
    tools = full.filter(pl.col("event_type").is_in(list(_KIND)))
    seq = (
        pl.concat(
            [
                plans.select("k", "line", is_plan=pl.lit(True)),
                tools.select("k", "line", is_plan=pl.lit(False)),
            ]
        )
        .sort("line")
        .with_columns(turn=pl.col("is_plan").cast(pl.Int64).cum_sum().over("k") - 1)
        .filter(~pl.col("is_plan"))
        .select("line", "turn")
    )
    tools = tools.join(seq, on="line").join(
        plans.select("k", turn=pl.col("turn_idx"), act="act"), on=("k", "turn"), how="left"
    )
    kind = pl.col("event_type").replace_strict(_KIND, default=None)
    if not tools.select(
        ((pl.col("turn") >= 0) & (pl.col("act") == kind)).fill_null(False).all()
        & ~pl.struct("k", "turn", "event_type").is_duplicated().any()
    ).item():
        raise Decline

    # padding: part of a rollout while it is in flight, else ignored
    pads = pads.join(keys.select("k", "first", "close"), on="k", how="left")
    taken = (
        pl.col("first").is_not_null()
        & (pl.col("line") > pl.col("first"))
        & (pl.col("line") < pl.col("close"))
    )
    ignored_new = pads.filter(~taken & (pl.col("pos") >= len(carry))).height
    pads = pads.filter(taken)

    # every event line of each rollout, in file order
    members = pl.concat([full.select("k", "line", "pos"), pads.select("k", "line", "pos")]).sort(
        "line"
    )
    # in the order the assembler writes them: at each event, those a newer step closes (in the
    # order they were opened), then the one the event completes
    done = (
        keys.filter("done")
        .sort("close", pl.col("closed_by_step").not_(), "first")
        .with_columns(o=pl.int_range(pl.len()))
    )
    pending = keys.filter(~pl.col("done")).select("k")
    held = members.filter(pl.col("k").is_in(pending["k"].implode()))  # in line order
    carry_out = list(zip(held["line"].to_list(), texts_at(texts, held["pos"]), strict=True))
    rows, counts = completed_rows(
        done, members, plans, tools, texts, lines_arr, asm, max_turns, data_source
    )

    # accepted: the assembler's state follows
    new = ev.filter(pl.col("pos") >= len(carry))
    asm.by_type.update(dict(new["event_type"].value_counts().iter_rows()))
    for st in starts:
        asm.run_start(st)
    side = rest.filter((pl.col("event_type") != "run.start") & (pl.col("pos") >= len(carry)))
    side_cols = zip(
        side["event_type"].to_list(),
        texts_at(texts, side["pos"]),
        side["run_id"].to_list(),
        strict=True,
    )
    for et, text, run in side_cols:
        keep_line(asm.ctx.side_tables, et, text, None, run)
        asm.side[et] += 1
    for run, top_step in final.iter_rows():
        asm.newest_step[run] = top_step
    if ignored_new:
        asm.n["empty plans ignored"] += ignored_new
    asm.n.update(counts)
    return rows, carry_out


def _rollout_key(roll: pl.DataFrame) -> pl.Expr:
    """One integer per rollout in the batch (``k``), exact: joins and group-bys on it cost about
    half of those on the three-part key. The run's dense rank and the step and sample offsets
    packed into 62 bits where they fit (they do for any realistic batch), else the key's dense
    rank."""
    runs, s0, s1, x0, x1 = roll.select(
        pl.col("run_id").n_unique(),
        s0=pl.col("global_step").min(),
        s1=pl.col("global_step").max(),
        x0=pl.col("sample_idx").min(),
        x1=pl.col("sample_idx").max(),
    ).row(0)
    if not len(roll):
        return pl.lit(0, pl.Int64)
    steps, samples = s1 - s0 + 1, x1 - x0 + 1
    if runs * steps * samples >= 2**62:
        return pl.struct(KEY).rank("dense").cast(pl.Int64)
    run = pl.col("run_id").rank("dense").cast(pl.Int64) - 1
    return (run * steps + (pl.col("global_step") - s0)) * samples + (pl.col("sample_idx") - x0)


def _horizon(keys: pl.DataFrame, roll: pl.DataFrame, asm: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``keys`` with ``horizon``: the line of the first event after the rollout opened that moves
    its run's newest step ``HORIZON`` past the rollout's (``_BIG``: none here); and each run's
    newest step after the batch."""
    newest = {r: s for r, s in asm.newest_step.items() if isinstance(s, int)}
    # windows per run only where the batch holds several (most hold one: no window needed)
    one_run = roll["run_id"].n_unique() <= 1

    def per_run(e: pl.Expr) -> pl.Expr:
        return e if one_run else e.over("run_id")

    steps = roll.select(  # in line order
        "run_id", "line", "global_step", top=per_run(pl.col("global_step").cum_max())
    )
    prior = (
        pl.col("run_id").replace_strict(newest, default=du.NO_STEP, return_dtype=pl.Int64)
        if newest
        else pl.lit(du.NO_STEP, pl.Int64)
    )
    steps = steps.with_columns(top=pl.max_horizontal("top", prior), prior=prior)
    final = (
        steps.select("run_id", "top").tail(1)
        if one_run
        else steps.group_by("run_id").agg(pl.col("top").last())
    )
    # the events where the newest step moves (the assembler's ``_advance``)
    adv = steps.filter(
        pl.col("global_step") > per_run(pl.col("top").shift(1)).fill_null(pl.col("prior"))
    )
    advances = {
        run: (g["line"].to_numpy(), g["top"].to_numpy())
        for (run,), g in adv.partition_by("run_id", as_dict=True).items()
    }
    out = []
    for (run,), g in keys.partition_by("run_id", as_dict=True).items():
        lines, tops = advances.get(run, (np.empty(0, np.int64), np.empty(0, np.int64)))
        after = np.searchsorted(lines, g["first"].to_numpy(), side="right")
        far = np.searchsorted(tops, g["global_step"].to_numpy() + du.HORIZON, side="left")
        i = np.maximum(after, far)
        at = np.append(lines, _BIG)[np.minimum(i, len(lines))]
        out.append(g.with_columns(horizon=pl.Series(at, dtype=pl.Int64)))
    if not out:  # no rollout event in the batch
        return keys.with_columns(horizon=pl.lit(_BIG, pl.Int64)), final
    return pl.concat(out), final
