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

Nulls sort last at every level. Prompts come out in the order they first appear in the log.
Every rollout not kept is counted under one reason. A rollout kept at ingest with a flag (e.g.
``turns_incomplete``: a turn lost from the log) counts for its prompt's success rate but is never
distilled, since its text is not whole (reason ``flagged <flag>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

NO_JUDGED = "prompt has no judged rollout"
NO_SUCCESS = "prompt has no success"
RATE_ABOVE_MAX = "prompt success rate above max"
NOT_SUCCESS = "not a success"
BEYOND_TOP_K = "beyond top-k"
FLAGGED = "flagged "  # + the rollout's first flag

_SCALARS = ("run_id", "step", "uid", "rollout_idx", "sample_idx", "judge_score", "format_ok")
_KEY = ("reward", "ndcg", "n_actions", "rollout_idx", "step", "sample_idx", "_row")
_DESCENDING = (True, True, False, False, False, False, False)
_GROUP = ("run_id", "uid")


@dataclass(frozen=True)
class SelectConfig:
    success_threshold: float = 1.0
    rate_max: float = 0.5
    top_k: int = 4

    def __post_init__(self) -> None:
        if not 0.0 < self.rate_max <= 1.0:
            raise ValueError(f"--success-rate-max must be in (0, 1], got {self.rate_max}")
        if self.top_k < 1:
            raise ValueError(f"--top-k must be >= 1, got {self.top_k}")


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
    return df.with_columns(flag=pl.col("flags").list.first()).drop("flags")


def select(table: pa.Table, cfg: SelectConfig) -> Selection:
    """Pick the rollouts to distill from a table in the rollout-log schema, or from its selection
    columns (``fetch.COLUMNS`` with ``n_turns`` for ``turns``)."""
    df = _frame(table)
    success = (pl.col("judge_score") >= cfg.success_threshold).fill_null(False) & pl.col(
        "format_ok"
    ).fill_null(True)
    df = df.with_columns(success=success).with_columns(
        n_judged=pl.col("judge_score").is_not_null().sum().over(_GROUP),
        n_success=pl.col("success").sum().over(_GROUP),
        first_row=pl.col("_row").min().over(_GROUP),
    )
    rate = pl.col("n_success") / pl.col("n_judged")
    prompt_reason = (
        pl.when(pl.col("n_judged") == 0)
        .then(pl.lit(NO_JUDGED))
        .when(pl.col("n_success") == 0)
        .then(pl.lit(NO_SUCCESS))
        .when(rate > cfg.rate_max)
        .then(pl.lit(RATE_ABOVE_MAX))
    )
    df = df.with_columns(prompt_reason=prompt_reason).with_columns(
        reason=pl.coalesce(
            pl.col("prompt_reason"),
            pl.when(~pl.col("success")).then(pl.lit(NOT_SUCCESS)),
            pl.when(pl.col("flag").is_not_null()).then(pl.lit(FLAGGED) + pl.col("flag")),
        )
    )
    ranked = (
        df.filter(pl.col("reason").is_null())
        .sort(list(_KEY), descending=list(_DESCENDING), nulls_last=True)
        .with_columns(rank=pl.int_range(pl.len()).over(_GROUP))
    )
    kept = ranked.filter(pl.col("rank") < cfg.top_k).sort(["first_row", "rank"])

    dropped = {r: n for r, n in df.group_by("reason").len().iter_rows() if r is not None and n}
    beyond = ranked.height - kept.height
    if beyond:
        dropped[BEYOND_TOP_K] = beyond
    prompts_df = df.group_by(_GROUP).agg(pl.col("prompt_reason").first())
    prompts = {"seen": prompts_df.height, "kept": kept.select(_GROUP).unique().height}
    for r, n in prompts_df.group_by("prompt_reason").len().iter_rows():
        if r is not None:
            prompts[r] = n
    return Selection(kept["_row"].to_list(), dict(sorted(dropped.items())), prompts)
