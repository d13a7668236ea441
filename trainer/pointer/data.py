"""Pointer training data: raw records → processed rows with rewards (seed 002 §2.2), per-method
statistics, and the tensors the trainer batches by query group (§4.2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ddai.pipelines.pointer import records, stats
from ddai.pipelines.pointer.store import EmbeddingStore
from ddai.pipelines.pointer.world import read_jsonl
from ddai.pipelines.records.deps import np, pl
from ddai.pipelines.store import io, manifest
from ddai.trainer.pointer.config import ProcessConfig, RewardConfig
from ddai.trainer.pointer.losses import shape_rewards


def _col(df: pl.DataFrame, name: str) -> Tensor:
    """Column ``name`` as float64 ``[rows]``, a missing value as NaN."""
    return torch.from_numpy(df[name].cast(pl.Float64).fill_null(float("nan")).to_numpy().copy())


def add_rewards(flat: pl.DataFrame, cfg: RewardConfig) -> pl.DataFrame:
    """``flat`` (evaluated rows only) with a ``reward`` column."""
    reward = shape_rewards(
        _col(flat, "vqa_correct"),
        _col(flat, "vqa_acc_score"),
        _col(flat, "beam_score"),
        _col(flat, "logprob_score"),
        alpha=cfg.alpha,
        beta=cfg.beta,
        correctness_mode=cfg.correctness_mode,
        quality=cfg.quality,
        use_acc_score=cfg.use_acc_score,
        clip=cfg.clip,
    )
    return flat.with_columns(pl.Series("reward", reward.numpy()))


def process_records(
    raw: list[dict[str, Any]], cfg: RewardConfig
) -> tuple[pl.DataFrame, dict[str, int]]:
    """Flatten, drop rows whose evaluation failed (counted by reason), add rewards."""
    flat = records.flatten(raw)
    failed = flat.filter(pl.col("eval_failed"))
    dropped = {f"eval_failed: {r}": n for r, n in failed.group_by("eval_error").len().iter_rows()}
    return add_rewards(flat.filter(~pl.col("eval_failed")), cfg), dropped


def stats_path(out: Path) -> Path:
    return out.with_name(out.stem + ".stats.parquet")


def run_process(cfg: ProcessConfig) -> dict[str, Any]:
    """Write the processed rows and the per-``gen_method`` statistics table, with manifests."""
    if cfg.out.suffix != ".parquet":
        raise ValueError(f"--out {cfg.out}: processed pointer data is written as .parquet")
    params = asdict(cfg.reward)
    if not cfg.force and manifest.is_fresh(cfg.out, "pointer.process", params, [cfg.raw]):
        return {"out": str(cfg.out), "skipped": "inputs and parameters unchanged (--force reruns)"}
    record = manifest.start("pointer.process", params, [cfg.raw])
    raw = read_jsonl(cfg.raw)
    k = max((r["candidate_pool"]["size"] for r in raw), default=2)
    df, dropped = process_records(raw, cfg.reward)
    _check_usable(cfg.raw, len(raw), df.height, dropped)
    table = stats.gen_method_stats(records.flatten(raw), k)
    io.write_parquet(cfg.out, df.to_arrow())
    io.write_parquet(stats_path(cfg.out), table.to_arrow())
    record.rows_in, record.rows_out = df.height + sum(dropped.values()), df.height
    for reason, n in dropped.items():
        record.drop(reason, n)
    manifest.write(cfg.out, record)
    stats_record = manifest.start("pointer.stats", {"k": k}, [cfg.raw])
    stats_record.rows_in, stats_record.rows_out = record.rows_in, table.height
    manifest.write(stats_path(cfg.out), stats_record)
    return {
        "out": str(cfg.out),
        "stats": str(stats_path(cfg.out)),
        "rows": df.height,
        "queries": df["query_id"].n_unique(),
        "dropped": sum(dropped.values()),
        "mean reward": round(float(df["reward"].mean()), 4) if df.height else None,
        **{
            f"{key}/{r['gen_method']}": rounded(r[col]) if col != "n" else r["n"]
            for r in table.iter_rows(named=True)
            for key, col in (("n", "n"), ("correct", "mean_correct"), ("top2_share", "top2_share"))
        },
        **quality_gaps(df, cfg.reward.quality),
    }


def quality_gaps(df: pl.DataFrame, quality: str) -> dict[str, Any]:
    """The rows without the score ``--quality`` names, and what that does to their reward.

    Seed 002 counts a missing quality as 0. The scores are log-probabilities (at most 0), so a
    row without one (only beam search gives ``beam_score``) gets a reward above every row that
    has one: under ``--quality beam`` sampled and random pointers outrank the beams."""
    col = {"beam": "beam_score", "logprob": "logprob_score"}.get(quality)
    if col is None or not df.height:
        return {}
    missing = int(df[col].cast(pl.Float64).fill_nan(None).is_null().sum())
    if not missing:
        return {}
    return {
        "quality missing": missing,
        "note": (
            f"{missing:,} of {df.height:,} rows have no {col} (--quality {quality}): they count "
            "quality 0, as in seed 002, while the scores the others have are log-probabilities "
            "(at most 0), so those rows get the higher rewards. Use --quality logprob (every "
            "pointer has one) or none, or generate beam candidates only"
        ),
    }


def _check_usable(raw: Path, records: int, rows: int, dropped: dict[str, int]) -> None:
    """Refuse raw records that leave no pointer row: the output would be an empty table that
    ``pointer train`` cannot learn from, written with exit 0."""
    if rows:
        return
    if not records:
        raise ValueError(
            f"{raw}: no raw records in it (an empty file); generate them with `ddai pointer gen "
            "--out FILE`; nothing was written"
        )
    if not dropped:
        raise ValueError(
            f"{raw}: its {records:,} records hold no pointer candidates; generate them with "
            "`ddai pointer gen`; nothing was written"
        )
    reasons = ", ".join(f"{r} ({n:,})" for r, n in sorted(dropped.items()))
    raise ValueError(
        f"{raw}: every pointer candidate's VQA evaluation failed ({reasons}), so no row has a "
        "reward; rerun `ddai pointer gen` once the VQA model answers; nothing was written"
    )


def check_rows(df: pl.DataFrame, path: Path) -> pl.DataFrame:
    """``df`` (the processed rows read from ``path``), refused when it has none."""
    if df.height == 0:
        raise ValueError(
            f"--data {path}: no processed pointer rows in it; make them with `ddai pointer gen` "
            "then `ddai pointer process RAW --out FILE`"
        )
    return df


def rounded(x: float | None) -> float | None:
    """A summary's number: 4 decimals (None stays None)."""
    return None if x is None else round(float(x), 4)


# ---------------------------------------------------------------- tensors


@dataclass
class GroupedRows:
    """Rows grouped by query: ``store_row [B]`` (row into the store), ``pointers [B, 2]``,
    ``rewards [B]``, ``old_logp [B]`` and ``group [B]`` (0..G-1, rows of a group contiguous)."""

    store_row: Tensor
    pointers: Tensor
    rewards: Tensor
    old_logp: Tensor
    group: Tensor
    starts: Tensor  # [G + 1]: rows of group g are starts[g]:starts[g+1]

    @property
    def n_groups(self) -> int:
        return int(self.starts.numel() - 1)

    def rows_of(self, groups: Tensor) -> Tensor:
        """Row indices ``[b]`` of the given groups, group by group."""
        return torch.cat(
            [torch.arange(int(self.starts[g]), int(self.starts[g + 1])) for g in groups.tolist()]
        )


def grouped_rows(df: pl.DataFrame, store: EmbeddingStore) -> GroupedRows:
    """Tensors of processed rows whose query the store holds (others raise: a mismatch)."""
    missing = sorted(set(df["query_id"].unique().to_list()) - set(store.query_ids))
    if missing:
        raise ValueError(
            f"{len(missing)} queries of the data are not in the embedding store (first: {missing[0]}); "
            "use the store the data was generated from"
        )
    df = df.with_columns(
        pl.col("query_id")
        .replace_strict({q: i for i, q in enumerate(store.query_ids)}, return_dtype=pl.Int64)
        .alias("_row")
    )
    df = df.with_row_index("_order").sort(["_row", "_order"])
    row = torch.from_numpy(df["_row"].to_numpy().copy())
    _, group = torch.unique_consecutive(row, return_inverse=True)
    counts = torch.bincount(group)
    starts = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    return GroupedRows(
        store_row=row,
        pointers=torch.from_numpy(np.array(df["pointer"].to_list(), dtype=np.int64).reshape(-1, 2)),
        rewards=_col(df, "reward").float(),
        old_logp=_col(df, "logprob_score").float(),
        group=group,
        starts=starts,
    )


def flat_groups(data: GroupedRows, tol: float = 1e-9) -> dict[str, int]:
    """Query groups with no reward variance, which no RL phase learns from: GRPO's and
    REINFORCE++'s group advantages are 0 and RCE's weights are uniform (they copy the sampled
    pointers whatever their reward). Counts ``groups``, ``flat`` (all of them), of those
    ``one_candidate`` (a single pointer pair) and ``same_reward`` (several, one reward)."""
    counts = (data.starts[1:] - data.starts[:-1]).tolist()
    one = same = 0
    for g, n in enumerate(counts):
        r = data.rewards[int(data.starts[g]) : int(data.starts[g + 1])]
        if n == 1:
            one += 1
        elif float(r.max() - r.min()) <= tol:
            same += 1
    return {"groups": len(counts), "flat": one + same, "one_candidate": one, "same_reward": same}


def check_signal(flat: dict[str, int], path: Path) -> str | None:
    """Refuse ``path``'s rows when no query group has reward variance (RL would train on zero
    advantages and say nothing); else a warning naming the share of flat groups, or None."""
    g, n = flat["groups"], flat["flat"]
    why = (
        f"{flat['one_candidate']:,} have one candidate pointer pair and {flat['same_reward']:,} "
        "the same reward on every candidate"
    )
    if g and n == g:
        raise ValueError(
            f"--data {path}: none of its {g:,} queries can teach the RL phases anything ({why}), "
            "so every advantage would be 0; nothing was written. Generate more candidates per "
            "query (`ddai pointer gen --num-beams/--n-per-temp/--num-random`), or a reward that "
            "separates them (`ddai pointer process --quality beam|logprob`)"
        )
    if not n:
        return None
    return (
        f"{n:,} of {g:,} queries ({n / g:.0%}) carry no learning signal ({why}); RL learns "
        "from the other queries only"
    )


def nearest_labels(store: EmbeddingStore) -> dict[str, list[str]]:
    """Each query's two most similar candidates (a pool is stored most similar first): the
    similarity annotator's labels, for a world that brings none."""
    return {qid: list(store.cand_ids[store.row(qid)][:2]) for qid in store.query_ids}


def label_pointers(
    labels: dict[str, list[str]], store: EmbeddingStore, query_ids: list[str]
) -> tuple[Tensor, Tensor, int]:
    """SFT targets: ``(store_row [N], pointers [N, 2], dropped)`` for labeled queries whose two
    labeled demonstrations are both in the query's pool (others are dropped and counted)."""
    rows, ptrs, dropped = [], [], 0
    for qid in query_ids:
        pair = labels.get(qid)
        if pair is None or qid not in store:
            dropped += 1
            continue
        pool = store.cand_ids[store.row(qid)]
        if pair[0] not in pool or pair[1] not in pool or pair[0] == pair[1]:
            dropped += 1
            continue
        rows.append(store.row(qid))
        ptrs.append([pool.index(pair[0]), pool.index(pair[1])])
    return (
        torch.tensor(rows, dtype=torch.long),
        torch.tensor(ptrs, dtype=torch.long).reshape(-1, 2),
        dropped,
    )
