"""Statistics of pointer selections: correctness per generation method and index-selection bias.

The candidate pool is ordered by similarity (index 0 is the query's nearest demonstration), so
where the picks fall in the pool shows a selector's bias: ``top2_share`` is the share of picks
among the two nearest, ``index_entropy`` the entropy of the pick histogram over the K positions
divided by log K (1: every position equally often).
"""

from __future__ import annotations

from ddai.pipelines.records.deps import np, pl


def index_histogram(pointers: np.ndarray, k: int) -> np.ndarray:
    """Share of picks at each pool position ``[k]`` over both steps of ``pointers [N, 2]``."""
    flat = np.asarray(pointers, dtype=np.int64).reshape(-1)
    if flat.size == 0:
        return np.zeros(k)
    return np.bincount(flat, minlength=k)[:k] / flat.size


def index_stats(pointers: np.ndarray, k: int) -> dict[str, float]:
    """``mean_index``, ``top2_share`` and normalized ``index_entropy`` of ``pointers [N, 2]``."""
    hist = index_histogram(pointers, k)
    nz = hist[hist > 0]
    entropy = float(-(nz * np.log(nz)).sum() / np.log(k)) if k > 1 and nz.size else 0.0
    return {
        "mean_index": float((hist * np.arange(k)).sum()),
        "top2_share": float(hist[:2].sum()),
        "index_entropy": entropy,
    }


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance ½·Σ|p − q| between two histograms."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def gen_method_stats(flat: pl.DataFrame, k: int) -> pl.DataFrame:
    """Per ``gen_method``: rows, queries, failed evaluations, mean correctness and VQA score,
    mean log π_old, and the index-selection bias of its pointers (seed 002, §5 stage 1)."""
    rows = []
    for method in flat["gen_method"].unique(maintain_order=True).to_list():
        part = flat.filter(pl.col("gen_method") == method)
        ok = part.filter(~pl.col("eval_failed"))
        pointers = np.array(part["pointer"].to_list(), dtype=np.int64).reshape(-1, 2)
        rows.append(
            {
                "gen_method": method,
                "n": part.height,
                "queries": part["query_id"].n_unique(),
                "eval_failed": part.height - ok.height,
                "mean_correct": ok["vqa_correct"].mean(),
                "mean_acc_score": ok["vqa_acc_score"].mean(),
                "mean_logprob": part["logprob_score"].mean(),
                **index_stats(pointers, k),
            }
        )
    return pl.DataFrame(rows)
