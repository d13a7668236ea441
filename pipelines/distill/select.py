"""Rare-success selection over the rollout log (seed 000, 7.1).

Success is DESIGN.md's (``judge_score >= threshold`` and ``format_ok`` not false); a prompt
(``run_id``, ``uid``) has success rate = successes / rollouts with a judge score, the
``prompts_at`` view's definition. Kept: prompts with ``0 < rate <= rate_max``, their successful
rollouts, the best ``top_k`` of each prompt by this stable key:

1. ``reward`` descending,
2. ``ndcg`` descending,
3. fewer actions (``num_turns``, else the number of turns) first,
4. ``rollout_idx`` ascending, then ``step``, ``sample_idx`` and log order (unique, so the order
   never depends on the sort algorithm).

Nulls sort last at every level. That is ``rank="reward"``; ``rank="ddai"`` is DDAI's finalize order
(``finalize_success_only_sft_dataset.py``, the spec's "prefer efficiency"):

1. ``ndcg`` descending,
2. fewer searches (search turns),
3. fewer bboxes (bbox turns),
4. shorter assistant text (the characters of every turn's text as the SFT messages hold it),
5. log order (DDAI sorts stably over its extractor's output, which is in log order).

DDAI counts searches and boxes with regexes over the message text; its bbox regex was
double-escaped in a raw string (``r"<bbox>\\s*\\[(.*?)\\]\\s*</bbox>"``), so it never matched and
every row counted 0 boxes there: here the bbox turns are counted, as the spec names them. An
invalid turn counts its think and argument as its length (its raw text is not in the columns).

Prompts come out in the order they first appear in the log.
Every rollout not kept is counted under one reason. A rollout kept at ingest with a flag (e.g.
``turns_incomplete``: a turn lost from the log) counts for its prompt's success rate but is never
distilled, since its text is not whole (reason ``flagged_<flag>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddai.pipelines.distill.select_config import RANKS as RANKS  # re-exported
from ddai.pipelines.distill.select_config import Rank as Rank  # re-exported
from ddai.pipelines.distill.select_config import SelectConfig
from ddai.pipelines.records.deps import pa, pc, pl

# Drop reasons: stable identifiers (summary and manifest keys, report rules), never prose.
NO_JUDGED = "prompt_no_judged_rollout"
NO_SUCCESS = "prompt_no_success"
RATE_ABOVE_MAX = "prompt_success_rate_above_max"
NOT_SUCCESS = "not_success"
BEYOND_TOP_K = "beyond_top_k"
FLAGGED = "flagged_"  # + the rollout's first flag

# What names a rollout in the log (and its sample: ``rebuild.sample_key``).
ROLLOUT_KEY = ("run_id", "step", "uid", "rollout_idx", "sample_idx")
_SCALARS = (*ROLLOUT_KEY, "judge_score", "format_ok")


_KEYS = {
    "reward": ("reward", "ndcg", "n_actions", "rollout_idx", "step", "sample_idx", "_row"),
    "ddai": ("ndcg", "n_search", "n_bbox", "approx_len", "_row"),
}
_DESCENDING = {
    "reward": (True, True, False, False, False, False, False),
    "ddai": (True, False, False, False, False),
}
STATS = ("n_search", "n_bbox", "approx_len")  # what rank "ddai" reads of the turns
_GROUP = ("run_id", "uid")


@dataclass
class Selection:
    """``rows``: indices into the input table, in output order (prompt, then rank)."""

    rows: list[int]
    dropped: dict[str, int] = field(default_factory=dict)
    prompts: dict[str, int] = field(default_factory=dict)


def _frame(table: pa.Table) -> pl.DataFrame:
    cols = {c: table[c] for c in (*_SCALARS, "reward", "ndcg")}
    # A full rollout table has ``turns``; distill's projected read brings only their count.
    if "turns" in table.column_names:
        n_turns = pc.list_value_length(table["turns"]).cast(pa.int32())
    else:
        n_turns = table["n_turns"]
    cols["n_actions"] = pc.coalesce(table["num_turns"], n_turns)
    cols["flags"] = table["flags"]
    df = pl.from_arrow(pa.table(cols)).with_row_index("_row")
    if "turns" in table.column_names:
        df = pl.concat([df, turn_stats(pl.from_arrow(table["turns"]))], how="horizontal")
    elif all(c in table.column_names for c in STATS):
        df = df.with_columns(pl.from_arrow(table.select(list(STATS))))
    else:
        df = df.with_columns(pl.lit(None, pl.Int64).alias(c) for c in STATS)
    return df.with_columns(flag=pl.col("flags").list.first()).drop("flags")


def turn_stats(turns: pl.Series) -> pl.DataFrame:
    """Per rollout (a list of turn structs): ``n_search``, ``n_bbox`` and ``approx_len``, the
    characters of its turns' text (``Turn.body()``: 20 tag characters + twice the action's name
    + think + separator + argument for a valid turn; think + argument for an invalid one)."""
    t = pl.DataFrame({"t": turns}).with_row_index("_i").explode("t").unnest("t")
    valid = pl.col("action").is_in(["search", "bbox", "search_complete"])
    n = pl.col("think").fill_null("").str.len_chars() + pl.col("arg").fill_null("").str.len_chars()
    body = (
        pl.when(valid)
        .then(
            20
            + 2 * pl.col("action").str.len_chars()
            + n
            + pl.col("sep").fill_null("").str.len_chars()
        )
        .otherwise(n)
    )
    out = t.group_by("_i", maintain_order=True).agg(
        n_search=(pl.col("action") == "search").sum().cast(pl.Int64),
        n_bbox=(pl.col("action") == "bbox").sum().cast(pl.Int64),
        approx_len=body.sum().cast(pl.Int64),
    )
    return out.sort("_i").drop("_i")


def success_expr(threshold: float) -> pl.Expr:
    """DESIGN.md's success rule over ``judge_score`` and ``format_ok`` (never null)."""
    return (pl.col("judge_score") >= threshold).fill_null(False) & pl.col("format_ok").fill_null(
        True
    )


def select(table: pa.Table, cfg: SelectConfig) -> Selection:
    """Pick the rollouts to distill from a table in the rollout-log schema, or from its selection
    columns (``fetch.COLUMNS`` with ``n_turns`` for ``turns``)."""
    df = _frame(table).with_columns(success=success_expr(cfg.success_threshold))
    groups = df.group_by(_GROUP).agg(
        n=pl.len(),
        n_judged=pl.col("judge_score").is_not_null().sum(),
        n_success=pl.col("success").sum(),
        first_row=pl.col("_row").min(),
    )
    return choose(groups, df.filter(pl.col("success")), cfg)


def prompt_reasons(groups: pl.DataFrame, cfg: SelectConfig) -> pl.DataFrame:
    """``groups`` (see ``choose``) with ``prompt_reason``: why the prompt is left out, null
    for a prompt whose success rate is in (0, ``rate_max``]."""
    rate = pl.col("n_success") / pl.col("n_judged")
    return groups.with_columns(
        prompt_reason=pl.when(pl.col("n_judged") == 0)
        .then(pl.lit(NO_JUDGED))
        .when(pl.col("n_success") == 0)
        .then(pl.lit(NO_SUCCESS))
        .when(rate > cfg.rate_max)
        .then(pl.lit(RATE_ABOVE_MAX))
    )


def choose(groups: pl.DataFrame, successes: pl.DataFrame, cfg: SelectConfig) -> Selection:
    """The selection from every prompt's counts and its successful rollouts.

    ``groups``: one row per prompt (``run_id``, ``uid``) with ``n`` rollouts, ``n_judged``,
    ``n_success`` and ``first_row`` (its first rollout's place in the log); ``successes``: at
    least the successful rollouts of the prompts that pass the rate rule, with ``cfg.rank``'s
    key (``_KEYS``) and ``flag``. One group-by gives every prompt's reason; only the successes of the prompts
    kept are ranked (a small share of the log), so nothing runs per rollout but the counts."""
    groups = prompt_reasons(groups, cfg)
    open_ = groups.filter(pl.col("prompt_reason").is_null())
    cands = successes.join(
        open_.select(*_GROUP, "first_row"), on=list(_GROUP), how="inner", nulls_equal=True
    )
    flagged = cands.filter(pl.col("flag").is_not_null())
    key = _KEYS[cfg.rank]
    ranked = (
        cands.filter(pl.col("flag").is_null())
        .sort(list(key), descending=list(_DESCENDING[cfg.rank]), nulls_last=True)
        # a prompt's first_row names it (unique per prompt): an integer key, cheaper than two strings
        .with_columns(rank=pl.int_range(pl.len()).over("first_row"))
    )
    kept = ranked.filter(pl.col("rank") < cfg.top_k).sort(["first_row", "rank"])

    dropped: dict[str, int] = {}
    for r, n in groups.group_by("prompt_reason").agg(pl.col("n").sum()).iter_rows():
        if r is not None and n:
            dropped[r] = int(n)
    # the rest of an open prompt's rollouts are not successes
    not_success = int(open_["n"].sum() - open_["n_success"].sum())
    if not_success:
        dropped[NOT_SUCCESS] = not_success
    for f, n in flagged.group_by("flag").len().iter_rows():
        dropped[FLAGGED + f] = n
    beyond = ranked.height - kept.height
    if beyond:
        dropped[BEYOND_TOP_K] = beyond
    prompts = {"seen": groups.height, "kept": kept["first_row"].n_unique()}
    reasons = groups.group_by("prompt_reason").len().drop_nulls("prompt_reason")
    for r, n in sorted(reasons.iter_rows()):
        prompts[r] = n
    return Selection(kept["_row"].to_list(), dict(sorted(dropped.items())), prompts)
