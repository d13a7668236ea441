"""``ddai pointer eval``: VQA accuracy of the pairs each selector picks on a held-out split, and
how the index-selection distribution moved (seed 002 §5 stage 5).

Selectors: every named model's greedy pick; ``<reference>:beam1``, the top beam of the first
(reference, usually SFT) model; and two baselines, ``similarity`` (pool positions 0 and 1, the two
nearest demonstrations) and ``random`` (a uniform pair, seeded).
"""

from __future__ import annotations

from typing import Any

import torch

from ddai.pipelines.pointer import stats
from ddai.pipelines.pointer import vqa as vqa_eval
from ddai.pipelines.pointer.store import EmbeddingStore
from ddai.pipelines.pointer.world import QUERIES_FILE
from ddai.pipelines.records.deps import np, pl
from ddai.pipelines.store import io, manifest
from ddai.trainer.pointer import decode
from ddai.trainer.pointer.config import EvalConfig
from ddai.trainer.pointer.data import rounded
from ddai.trainer.pointer.generate import split_inputs
from ddai.trainer.pointer.model import WEIGHTS_FILE, PointerSelector, load_pointer


def selections(
    models: dict[str, PointerSelector],
    store: EmbeddingStore,
    *,
    num_beams: int = 5,
    seed: int = 0,
    baselines: bool = True,
) -> dict[str, np.ndarray]:
    """Selector name → pointers ``[N, 2]`` over the store's queries (in store order)."""
    q, c = torch.from_numpy(store.query_emb), torch.from_numpy(store.cand_emb)
    out: dict[str, np.ndarray] = {}
    for i, (name, model) in enumerate(models.items()):
        model.eval()
        out[name] = decode.greedy(model, q, c).numpy()
        if i == 0 and num_beams > 1:
            out[f"{name}:beam1"] = decode.beam_search(model, q, c, num_beams)[0][:, 0].numpy()
    if baselines:
        n = len(store)
        out["similarity"] = np.tile(np.array([0, 1]), (n, 1))
        gen = torch.Generator().manual_seed(seed)
        out["random"] = decode.random_pairs(n, store.k, 1, generator=gen)[:, 0].numpy()
    return out


def score_selections(
    sel: dict[str, np.ndarray],
    store: EmbeddingStore,
    queries: list[dict[str, Any]],
    demos: dict[str, dict[str, Any]],
    vqa_model: Any,
    *,
    metric: str = "vqa",
    threshold: float = vqa_eval.DEFAULT_THRESHOLD,
    progress: bool = False,
) -> pl.DataFrame:
    """One row per (selector, query): pointer, answer, score, correct, eval_failed."""
    items, keys = [], []
    for name, ptrs in sel.items():
        for q, pool, (a, b) in zip(queries, store.cand_ids, ptrs.tolist(), strict=True):
            items.append((q, [demos[pool[a]], demos[pool[b]]]))
            keys.append((name, q["query_id"], [a, b]))
    outcomes = vqa_eval.evaluate(
        vqa_model, items, metric=metric, threshold=threshold, progress=progress
    )
    return pl.DataFrame(
        [
            {
                "selector": name,
                "query_id": qid,
                "pointer": ptr,
                "vqa_pred_answer": o.pred_answer,
                "vqa_acc_score": o.acc_score,
                "vqa_correct": o.correct,
                "eval_failed": o.eval_failed,
            }
            for (name, qid, ptr), o in zip(keys, outcomes, strict=True)
        ],
        schema={
            "selector": pl.String,
            "query_id": pl.String,
            "pointer": pl.List(pl.Int32),
            "vqa_pred_answer": pl.String,
            "vqa_acc_score": pl.Float64,
            "vqa_correct": pl.Int8,
            "eval_failed": pl.Boolean,
        },
    )


def summarize(
    scored: pl.DataFrame, sel: dict[str, np.ndarray], k: int, reference: str | None
) -> pl.DataFrame:
    """Per selector: mean VQA score and correctness, index bias, and the total-variation
    distance of its index histogram from the reference selector's."""
    ref_hist = stats.index_histogram(sel[reference], k) if reference in sel else None
    rows = []
    for name, ptrs in sel.items():
        part = scored.filter((pl.col("selector") == name) & ~pl.col("eval_failed"))
        rows.append(
            {
                "selector": name,
                "queries": len(ptrs),
                "eval_failed": int(scored.filter(pl.col("selector") == name)["eval_failed"].sum()),
                "vqa_acc": part["vqa_acc_score"].mean(),
                "correct": part["vqa_correct"].mean(),
                **stats.index_stats(ptrs, k),
                "tv_vs_reference": (
                    stats.total_variation(stats.index_histogram(ptrs, k), ref_hist)
                    if ref_hist is not None
                    else None
                ),
            }
        )
    return pl.DataFrame(rows)


def run_eval(cfg: EvalConfig, *, vqa_model: Any = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Evaluate every selector; returns the summary table and the command's summary dict."""
    if not cfg.models:
        raise ValueError("give at least one --model NAME=CHECKPOINT")
    names = [n for n, _ in cfg.models]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique, got {names}")
    sub, queries, demos = split_inputs(cfg, cfg.split)
    models = {name: load_pointer(path) for name, path in cfg.models}
    sel = selections(models, sub, num_beams=cfg.num_beams, seed=cfg.seed)
    model_vqa = vqa_model if vqa_model is not None else vqa_eval.resolve_vqa(cfg.vqa)
    source = vqa_eval.vqa_source(model_vqa)
    if cfg.dry_run:
        items = [
            (q, [demos[pool[a]], demos[pool[b]]])
            for ptrs in sel.values()
            for q, pool, (a, b) in zip(queries, sub.cand_ids, ptrs.tolist(), strict=True)
        ]
        plan = vqa_eval.plan(model_vqa, items)
        return pl.DataFrame(), {"selectors": list(sel), **plan, **source}
    scored = score_selections(
        sel,
        sub,
        queries,
        demos,
        model_vqa,
        metric=cfg.metric,
        threshold=cfg.correct_threshold,
        progress=cfg.progress,
    )
    table = summarize(scored, sel, sub.k, names[0])
    if cfg.out is not None:
        inputs = [
            cfg.store,
            cfg.world / QUERIES_FILE,
            *(p / WEIGHTS_FILE for _, p in cfg.models),
        ]
        params = {"split": cfg.split, "num_beams": cfg.num_beams, "metric": cfg.metric,
                  "correct_threshold": cfg.correct_threshold, "vqa": cfg.vqa, "seed": cfg.seed,
                  "models": {n: str(p) for n, p in cfg.models}}  # fmt: skip
        for name, df in (("selections.parquet", scored), ("summary.parquet", table)):
            record = manifest.start("pointer.eval", params, inputs, seed=cfg.seed)
            record.rows_in, record.rows_out = len(queries), df.height
            record.notes = dict(source)
            io.write_parquet(cfg.out / name, df.to_arrow())
            manifest.write(cfg.out / name, record)
    result = {
        "split": cfg.split,
        "queries": len(queries),
        **{
            f"{r['selector']}/{key}": rounded(r[col])
            for r in table.iter_rows(named=True)
            for key, col in (
                ("vqa_acc", "vqa_acc"),
                ("correct", "correct"),
                ("top2_share", "top2_share"),
                ("tv_vs_ref", "tv_vs_reference"),
            )
        },
    }
    result.update(source)
    if cfg.out is not None:
        result["out"] = str(cfg.out)
    return table, result
