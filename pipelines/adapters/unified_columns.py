"""DDAI's unified log read in columns: one clean ``LineBatch`` (plus the event lines of rollouts
still in flight from the batch before) → rollout rows as Arrow.

The batch is parsed by Arrow's JSON reader (the fields the join reads typed, so a value of
another type or a key given twice makes it refuse the batch); the event join is a polars
group-by over (``run_id``, ``global_step``, ``sample_idx``). A rollout whose events are not all
in yet is carried to the next batch as its event lines, so memory stays bounded by the rollouts
in flight. Turns are cut by the tag parser (one call per logged plan); rewards go through
``flash_rollout`` and ``normalize_rollout`` without their turns (the scalar columns and
``extra``); turns, ``response`` and the derived columns are built in columns.

It takes a batch only when every rollout it completes is one the event-by-event reader
(``ddai_unified._Assembler``) completes the same way, at the same event; otherwise it returns
None and that batch goes event by event, with the same rollouts, quarantine and notes. It
declines a batch holding:

- a line Arrow refuses, one without a string ``event_type``, a rollout event without
  ``run_id`` / ``global_step`` / ``sample_idx``, a plan without ``turn_idx``;
- a rollout whose plans are not logged in turn order from 0 (a gap, a repeat, out of order),
  whose turn before the last ends it, with two rewards, or with an event after the one that
  completed it (padding aside);
- a tool event that does not fit the turn logged just before it (the event-by-event reader's
  fallback placement);
- a rollout that its run's newer steps would close before it completes (``HORIZON``);
- a ``run.start`` after an event of its run; a row the schema refuses or flags.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.json as pj

from ddai.pipelines import metrics, tags
from ddai.pipelines.adapters import ddai_unified as du
from ddai.pipelines.adapters.base import RowBatch
from ddai.pipelines.adapters.ddai_common import executed_action, flash_rollout
from ddai.pipelines.adapters.line_batches import LineBatch
from ddai.pipelines.schema import ROLLOUT_SCHEMA, TURN_TYPE, RowError, normalize_rollout
from ddai.pipelines.store import check_run_id

KEY = ("run_id", "global_step", "sample_idx")
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
_READ = pj.ReadOptions(block_size=2 << 20)
_KIND = {du.SEARCH_RESPONSE: "search", du.BBOX: "bbox"}
_BIG = 2**62


class _Decline(Exception):
    """The batch goes event by event."""


def read_batch(
    batch: LineBatch, carry: list[tuple[int, str]], asm: du._Assembler
) -> tuple[list[RowBatch], list[tuple[int, str]]] | None:
    """The batch's completed rollouts (one ``RowBatch`` per run) and the event lines of those
    still in flight, or None to read the batch event by event (``asm`` then untouched)."""
    try:
        return _read(batch, carry, asm)
    except _Decline:
        return None


def _read(
    batch: LineBatch, carry: list[tuple[int, str]], asm: du._Assembler
) -> tuple[list[RowBatch], list[tuple[int, str]]]:
    head = "".join(t + "\n" for _, t in carry).encode("utf-8")
    try:
        parsed = pj.read_json(
            pa.py_buffer(head + batch.data), read_options=_READ, parse_options=_PARSE
        )
    except (pa.ArrowException, ValueError) as e:
        raise _Decline from e
    # each line's text with its newline (the batch's over its bytes)
    texts = pl.concat(
        [
            pl.Series([t + "\n" for _, t in carry], dtype=pl.String),
            pl.from_arrow(batch.lines()).cast(pl.String),
        ]
    )
    n_new = len(texts) - len(carry)
    if parsed.num_rows != len(texts):
        raise _Decline
    lines = np.concatenate(
        [np.array([ln for ln, _ in carry], np.int64), np.arange(n_new) + batch.first_line]
    )
    ev = pl.from_arrow(parsed).with_columns(
        line=pl.Series(lines), pos=pl.int_range(pl.len(), dtype=pl.Int64)
    )
    if ev["event_type"].null_count():
        raise _Decline
    is_roll = pl.col("event_type").is_in(du.ROLLOUT_EVENTS)
    rest = ev.filter(~is_roll).select("pos", "event_type", "run_id", "line")
    roll = ev.filter(is_roll)
    if roll.select(pl.any_horizontal(pl.col(*KEY).is_null().any())).item():
        raise _Decline
    plan = pl.col("event_type") == du.PLAN
    if roll.filter(plan)["turn_idx"].null_count():
        raise _Decline

    # run.start: before any event of its run here (the rows read its max_turns / data_source)
    starts = [
        json.loads(x)
        for x in _texts(texts, rest.filter(pl.col("event_type") == "run.start")["pos"])
    ]
    max_turns, data_source = dict(asm.max_turns), dict(asm.data_source)
    first_of_run = dict(roll.group_by("run_id").agg(pl.col("line").min()).iter_rows())
    for line, ev_start in zip(
        rest.filter(pl.col("event_type") == "run.start")["line"], starts, strict=True
    ):
        run = ev_start.get("run_id")
        if run in first_of_run and first_of_run[run] < line:
            raise _Decline
        cfg = ev_start.get("config") if isinstance(ev_start.get("config"), dict) else {}
        data = cfg.get("data") if isinstance(cfg.get("data"), dict) else {}
        max_turns[run] = du._int(cfg.get("max_turns"))
        ds = data.get("data_source")
        data_source[run] = ds if isinstance(ds, str) else None

    empty = plan & (pl.col("text").is_null() | (pl.col("text") == ""))
    full = roll.filter(~empty)
    pads = roll.filter(empty)
    plans = full.filter(plan).sort("line")
    acts, parsed_turns = _parse_plans(plans["text"])
    plans = plans.with_columns(
        act=pl.Series(acts, dtype=pl.String),
        ends=(
            (pl.col("is_last_turn") == True)  # noqa: E712 - null is not True
            | (pl.col("final_rollout") == True)  # noqa: E712
            | (pl.Series(acts, dtype=pl.String) == "search_complete")
        ).fill_null(False),
        tpos=pl.int_range(pl.len(), dtype=pl.Int64),
    )
    # plans logged in turn order from 0, each once; only the last may end the rollout
    plans = plans.with_columns(
        rank=pl.int_range(pl.len(), dtype=pl.Int64).over(KEY),
        last=pl.col("turn_idx").max().over(KEY),
    )
    if not plans.select(
        (pl.col("turn_idx") == pl.col("rank")).all()
        & (~pl.col("ends") | (pl.col("turn_idx") == pl.col("last"))).all()
    ).item():
        raise _Decline

    rewards = full.filter(pl.col("event_type") == du.REWARD)
    keys = full.group_by(KEY).agg(first=pl.col("line").min())
    rk = rewards.group_by(KEY).agg(
        n_reward=pl.len(), reward_line=pl.col("line").first(), reward_pos=pl.col("pos").first()
    )
    if len(rk) and rk["n_reward"].max() > 1:
        raise _Decline
    pk = plans.group_by(KEY).agg(
        n_turns=pl.len(),
        last_line=pl.col("line").max(),
        ends=pl.col("ends").last(),
        uid=pl.col("uid").first(),
        uids=pl.col("uid").n_unique(),
        response=pl.col("text").str.join(""),
    )
    keys = keys.join(rk, on=KEY, how="left").join(pk, on=KEY, how="left")
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
    # a rollout closed by a newer step is kept as is only with its reward (the rest is the
    # assembler's: without a reward it is quarantined or kept with null scores)
    if keys.select((pl.col("closed_by_step") & pl.col("n_reward").is_null()).any()).item():
        raise _Decline

    # nothing but padding after the event that completed the rollout
    full = full.join(keys.select(*KEY, "first", "close"), on=KEY)
    if full.select((pl.col("line") > pl.col("close")).any()).item():
        raise _Decline

    # tool events: on the turn logged just before them, of their kind, one each
    tools = full.filter(pl.col("event_type").is_in(list(_KIND)))
    seq = (
        pl.concat(
            [
                plans.select(*KEY, "line", is_plan=pl.lit(True)),
                tools.select(*KEY, "line", is_plan=pl.lit(False)),
            ]
        )
        .sort("line")
        .with_columns(turn=pl.col("is_plan").cast(pl.Int64).cum_sum().over(KEY) - 1)
        .filter(~pl.col("is_plan"))
        .select("line", "turn")
    )
    tools = tools.join(seq, on="line").join(
        plans.select(*KEY, turn=pl.col("turn_idx"), act="act"), on=(*KEY, "turn"), how="left"
    )
    kind = pl.col("event_type").replace_strict(_KIND, default=None)
    if not tools.select(
        ((pl.col("turn") >= 0) & (pl.col("act") == kind)).fill_null(False).all()
        & ~pl.struct(*KEY, "turn", "event_type").is_duplicated().any()
    ).item():
        raise _Decline

    # padding: part of a rollout while it is in flight, else ignored
    pads = pads.join(keys.select(*KEY, "first", "close"), on=KEY, how="left")
    taken = (
        pl.col("first").is_not_null()
        & (pl.col("line") > pl.col("first"))
        & (pl.col("line") < pl.col("close"))
    )
    ignored_new = pads.filter(~taken & (pl.col("pos") >= len(carry))).height
    pads = pads.filter(taken)

    # every event line of each rollout, in file order
    members = pl.concat([full.select(*KEY, "line", "pos"), pads.select(*KEY, "line", "pos")]).sort(
        "line"
    )
    # in the order the assembler writes them: at each event, those a newer step closes (in the
    # order they were opened), then the one the event completes
    done = (
        keys.filter("done")
        .sort("close", pl.col("closed_by_step").not_(), "first")
        .with_columns(o=pl.int_range(pl.len()))
    )
    pending = keys.filter(~pl.col("done")).select(KEY)
    held = members.join(pending, on=KEY).sort("line")
    carry_out = list(zip(held["line"].to_list(), _texts(texts, held["pos"]), strict=True))
    rows, counts = _rows(
        done, members, plans, parsed_turns, tools, texts, asm, max_turns, data_source
    )

    # accepted: the assembler's state follows
    new = ev.filter(pl.col("pos") >= len(carry))
    asm.by_type.update(dict(new["event_type"].value_counts().iter_rows()))
    for st in starts:
        asm._run_start(st)
    side = rest.filter((pl.col("event_type") != "run.start") & (pl.col("pos") >= len(carry)))
    for et, text in zip(side["event_type"].to_list(), _texts(texts, side["pos"]), strict=True):
        asm.ctx.side_tables.setdefault(et, []).append(json.loads(text))
        asm.side[et] += 1
    for run, top_step in final.iter_rows():
        asm.newest_step[run] = top_step
    if ignored_new:
        asm.n["empty plans ignored"] += ignored_new
    asm.n.update(counts)
    return rows, carry_out


# A turn in the canonical shape (ASCII whitespace, one think, one action, chat residue around):
# cut by one regex over the column; the tag parser would read it the same. Anything else (and
# an argument the parser refuses: an empty search, a bad box) goes through the parser.
_WS = r"[ \t\n\r\f\v]"
_RESIDUE = (
    rf"(?:{_WS}|<\|im_end\|>|<\|endoftext\|>|<\|im_start\|>(?:assistant)?|</s>|<\|eot_id\|>)*"
)
_CANON = (
    rf"(?s)^{_RESIDUE}<think>(.*?)</think>({_WS}*)<(search|bbox|search_complete)>(.*?)"
    rf"</(search|bbox|search_complete)>{_RESIDUE}$"
)
_ANY_TAG = r"</?(?:think|search_complete|search|bbox|answer)>"


def _texts(texts: pl.Series, pos: pl.Series | list[int]) -> list[str]:
    """The lines at ``pos``, without their newlines."""
    return texts.gather(pos).str.strip_suffix("\n").to_list()


def _parse_plans(texts: pl.Series) -> tuple[list[str | None], list[tags.Turn]]:
    """Per plan text: the action DDAI executed and the parsed turn (``tags.parse_turn``)."""
    g = (
        pl.DataFrame({"t": texts})
        .select(
            m=pl.col("t").str.extract_groups(_CANON),
        )
        .unnest("m")
    )
    g.columns = ["think", "sep", "name", "arg", "close"]
    ok = g.select(
        (
            (pl.col("name") == pl.col("close"))
            & ~pl.col("think").str.contains(_ANY_TAG)
            & ~pl.col("arg").str.contains(_ANY_TAG)
        ).fill_null(False)
    ).to_series()
    acts: list[str | None] = []
    turns: list[tags.Turn] = []
    cols = zip(
        texts.to_list(),
        ok.to_list(),
        *(g[c].to_list() for c in ("think", "sep", "name", "arg")),
        strict=True,
    )
    for text, fast, think, sep, name, arg in cols:
        if fast and (
            (name == "search" and arg.strip())
            or (name == "search_complete" and arg.strip().lower() == "true")
            or (name == "bbox" and tags._bbox_ok(arg))
        ):
            forced = name == "search_complete" and bool(tags.FORCED_THINK_RE.search(think))
            acts.append(name)
            turns.append(tags.Turn(0, think, name, arg, sep, forced=forced))
        else:
            acts.append(executed_action(text)[0])
            turns.append(tags.parse_turn(text))
    return acts, turns


def _horizon(
    keys: pl.DataFrame, roll: pl.DataFrame, asm: du._Assembler
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``keys`` with ``horizon``: the line of the first event after the rollout opened that moves
    its run's newest step ``HORIZON`` past the rollout's (``_BIG``: none here); and each run's
    newest step after the batch."""
    newest = {r: s for r, s in asm.newest_step.items() if isinstance(s, int)}
    steps = roll.sort("line").select(
        "run_id", "line", "global_step", top=pl.col("global_step").cum_max().over("run_id")
    )
    prior = (
        pl.col("run_id").replace_strict(newest, default=du._NO_STEP, return_dtype=pl.Int64)
        if newest
        else pl.lit(du._NO_STEP, pl.Int64)
    )
    steps = steps.with_columns(top=pl.max_horizontal("top", prior), prior=prior)
    final = steps.group_by("run_id").agg(pl.col("top").last())
    # the events where the newest step moves (the assembler's ``_advance``)
    adv = steps.filter(
        pl.col("global_step") > pl.col("top").shift(1).over("run_id").fill_null(pl.col("prior"))
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
    return pl.concat(out), final


def _rows(
    done: pl.DataFrame,
    members: pl.DataFrame,
    plans: pl.DataFrame,
    parsed_turns: list[tags.Turn],
    tools: pl.DataFrame,
    texts: pl.Series,
    asm: du._Assembler,
    max_turns: dict[Any, int | None],
    data_source: dict[Any, str | None],
) -> tuple[list[RowBatch], Counter]:
    """The completed rollouts as rows, in the order they completed."""
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
    recs = [parsed_turns[j] for j in t["tpos"].to_list()]
    retrieved: list[list[str] | None] = [None] * len(t)
    observation: list[str | None] = [None] * len(t)
    errors = [r.error for r in recs]
    search_results: list[list[list[str]]] = [[] for _ in range(n)]
    shown_pages: list[list[str]] = [[] for _ in range(n)]
    err_at = [p for p in t["err_pos"].to_list() if p is not None]
    err_of = {
        p: json.loads(x).get("error") for p, x in zip(err_at, _texts(texts, err_at), strict=True)
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

    rows = []
    run_id = asm.ctx.run_id
    cols = (done[c].to_list() for c in (*KEY, "uid", "uids", "n_turns"))
    rewards = _texts(texts, done["reward_pos"])
    first = 0
    for o, (run, step, sidx, uid, uids, nt) in enumerate(zip(*cols, strict=True)):
        reward = json.loads(rewards[o])
        payload = {k: v for k, v in reward.items() if k not in du.CONTEXT_FIELDS}
        rec = flash_rollout(payload)
        n_agent = du._int(reward.get("n_agent"))
        reward_uid = rec.get("uid")
        if uid is not None and not du._same_prompt(uid, reward_uid, sidx, n_agent):
            rec["reward_uid"] = reward_uid
            counts["reward uid differs from plan uid"] += 1
        if uids > 1:
            counts["plan uids differ within a rollout"] += 1
        rec["uid"] = uid if uid is not None else rec.get("uid")
        local_idx = rec.pop("rollout_idx", None)
        if n_agent:
            rec["rollout_idx"] = sidx % n_agent
            if local_idx is not None and local_idx != rec["rollout_idx"]:
                rec["local_idx"] = local_idx
                counts["local_idx differs from sample_idx mod n_agent"] += 1
        else:
            rec["rollout_idx"] = local_idx
        for k in du._EXTRA_CONTEXT:
            if k in reward:
                rec[k] = reward[k]
        mt = max_turns.get(run)
        if mt is not None:
            rec["max_turns"] = mt
        rec["search_results"] = search_results[o]
        if rec.get("retrieved_pages") is None and shown_pages[o]:
            rec["retrieved_pages"] = metrics.dedupe(shown_pages[o])
        # the turn-derived columns (tags.terminated_from, the format gate)
        last = recs[first + nt - 1]
        valid = all(r.action != "invalid" for r in recs[first : first + nt])
        if last.action == "search_complete":
            term = "max_turns" if last.forced else "complete"
        else:
            term = "max_turns" if mt is not None and nt >= mt else "invalid"
        first += nt
        rec.update(
            run_id=run,
            step=step,
            sample_idx=sidx,
            data_source=data_source.get(run),
            num_turns=nt,
            terminated=term,
            format_ok=valid and last.action == "search_complete",
        )
        # the rest through the schema's own normalization (turns and response come in columns)
        try:
            row = normalize_rollout(rec, run_id=run_id)
            check_run_id(row["run_id"])
        except (RowError, ValueError) as e:
            raise _Decline from e
        if row["flags"]:  # flagged rows are counted per row: the per-row path does that
            raise _Decline
        rows.append(row)
    counts["rollouts assembled"] += n
    built = {"turns": _turns_array(t, recs, retrieved, observation, errors)}
    built["response"] = done["response"].to_arrow().cast(pa.string())
    table = pa.table(
        {
            f.name: built.get(f.name) or pa.array([r[f.name] for r in rows], f.type)
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
        lines = _texts(texts, events.filter(pl.col("o") == i)["pos"])
        return du.rollout_raw(keys[i], [json.loads(x) for x in lines])

    line_nos = done["reward_line"].to_list()
    runs = [r["run_id"] for r in rows]
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
    recs: list[tags.Turn],
    retrieved: list,
    observation: list,
    errors: list,
) -> pa.Array:
    """The ``turns`` column: one list of turn structs per completed rollout."""
    fields = {
        "idx": pa.array(t["turn_idx"].to_list(), pa.int32()),
        "think": pa.array([r.think for r in recs], pa.string()),
        "action": pa.array([r.action for r in recs], pa.string()),
        "arg": pa.array([r.arg for r in recs], pa.string()),
        "sep": pa.array([r.sep for r in recs], pa.string()),
        "forced": pa.array([r.forced for r in recs], pa.bool_()),
        "retrieved": pa.array(retrieved, pa.list_(pa.string())),
        "observation": pa.array(observation, pa.string()),
        "error": pa.array(errors, pa.string()),
        "value": pa.nulls(len(recs), pa.float64()),
    }
    structs = pa.StructArray.from_arrays(list(fields.values()), fields=list(TURN_TYPE))
    sizes = t.group_by("o", maintain_order=True).len().sort("o")["len"].to_numpy()
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=pa.list_(TURN_TYPE))
