"""``ddai pointer gen``: RL data from a pointer model (seed 002 §3).

Per query: beam search, temperature sampling at several τ, and uniform random pairs, all
decoded for every query at once; de-duplicated by unordered pair (beam > sample > random); then
every surviving pair is answered by the ``VQAModel`` and scored, so correctness is always
recorded. Output: the raw per-query JSONL of §2.1 and its manifest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

import torch
from torch import Tensor

from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
from ddai.pipelines.pointer import records
from ddai.pipelines.pointer import vqa as vqa_eval
from ddai.pipelines.pointer.records import PointerCandidate
from ddai.pipelines.pointer.store import EmbeddingStore, load_store
from ddai.pipelines.pointer.world import DEMOS_FILE, QUERIES_FILE, jsonl, load_world
from ddai.pipelines.store import io, manifest
from ddai.trainer.pointer import decode
from ddai.trainer.pointer.config import GenConfig, ProposalConfig, VqaStep
from ddai.trainer.pointer.model import WEIGHTS_FILE, PointerSelector, load_pointer


@torch.no_grad()
def propose(
    model: PointerSelector, query_emb: Tensor, cand_emb: Tensor, cfg: ProposalConfig
) -> list[list[PointerCandidate]]:
    """Candidates per query, de-duplicated, with ``logprob_score`` = log π(pointer) at τ = 1.

    ``query_emb [N, d]``, ``cand_emb [N, K, d]``. Each method is decoded for all N queries in one
    batch; order within a query: beams by rank, then samples by τ, then random pairs.
    """
    model.eval()
    n, k = cand_emb.shape[:2]
    gen = torch.Generator().manual_seed(cfg.seed)
    # (method, pointers [N, m, 2], beam scores or None, generating log-prob [N, m] or None, τ)
    parts: list[tuple[str, Tensor, Tensor | None, Tensor | None, float | None]] = []
    if cfg.num_beams:
        ptr, score = decode.beam_search(model, query_emb, cand_emb, cfg.num_beams)
        parts.append(("beam", ptr, score, None, None))
    for tau in cfg.temperatures:
        if cfg.n_per_temp:
            ptr, lp = decode.sample(
                model, query_emb, cand_emb, temperature=tau, n=cfg.n_per_temp, generator=gen
            )
            parts.append(("sample", ptr, None, lp, tau))
    if cfg.num_random:
        ptr = decode.random_pairs(n, k, cfg.num_random, generator=gen)
        parts.append(
            ("random", ptr, None, torch.full(ptr.shape[:2], decode.random_pair_logprob(k)), None)
        )

    # log π_old at τ = 1 of every pointer, one batched pass over all methods
    all_ptr = torch.cat([p[1] for p in parts], dim=1)  # [N, M, 2]
    m = all_ptr.shape[1]
    old = model.sequence_log_prob(
        query_emb.repeat_interleave(m, 0),
        cand_emb.repeat_interleave(m, 0),
        all_ptr.reshape(n * m, 2),
    ).reshape(n, m)

    out: list[list[PointerCandidate]] = [[] for _ in range(n)]
    col = 0
    for method, ptr, score, lp, tau in parts:
        for j in range(ptr.shape[1]):
            for i in range(n):
                out[i].append(
                    PointerCandidate(
                        pointer=[int(x) for x in ptr[i, j]],
                        gen_method=method,
                        beam_rank=j if method == "beam" else None,
                        beam_score=float(score[i, j]) if score is not None else None,
                        logprob_score=float(old[i, col + j]),
                        temperature=tau,
                        gen_logprob=float(lp[i, j]) if lp is not None else None,
                    )
                )
        col += ptr.shape[1]
    return [records.dedupe_candidates(c) for c in out]


def split_inputs(
    cfg: VqaStep, split: str | None
) -> tuple[EmbeddingStore, list[dict], dict[str, dict]]:
    """What ``gen`` and ``eval`` read: the store cut to the world's queries of ``split`` (all
    when None) that it holds, in store order; those query rows; the demonstrations by id. An
    empty selection is refused."""
    store, world = load_store(cfg.store), load_world(cfg.world, embeddings=False)
    by_id = {q["query_id"]: q for q in world.queries}
    rows = [by_id[qid] for qid in store.query_ids if qid in by_id]
    queries = [q for q in rows if split is None or q.get("split") == split]
    if not queries:
        raise ValueError(f"no query of split {split!r} is both in {cfg.world} and in {cfg.store}")
    sub = store.subset([q["query_id"] for q in queries])
    return sub, queries, {d["demo_id"]: d for d in world.demos}


def run_gen(cfg: GenConfig, *, vqa_model: Any = None) -> dict[str, Any]:
    """Generate, evaluate and write the raw records; ``vqa_model`` overrides the backend."""
    vqa_eval.scorer(cfg.metric)
    inputs = [cfg.store, cfg.world / QUERIES_FILE, cfg.world / DEMOS_FILE, cfg.model / WEIGHTS_FILE]
    params = {
        **asdict(cfg.proposal),
        "split": cfg.split,
        "vqa": cfg.vqa,
        "metric": cfg.metric,
        "correct_threshold": cfg.correct_threshold,
    }
    if (
        not cfg.force
        and not cfg.dry_run
        and manifest.is_fresh(cfg.out, "pointer.gen", params, inputs)
    ):
        # an output written without the calls that failed says so again (the command exits 1)
        old = failed_calls((manifest.read(cfg.out) or {}).get("backend_calls") or {})
        return {
            "out": str(cfg.out),
            "skipped": "inputs and parameters unchanged (--force reruns)",
            **({FAILED_CALLS: old} if old else {}),
        }
    sub, queries, demos = split_inputs(cfg, cfg.split)
    model = load_pointer(cfg.model)
    if model.cfg.d_in != sub.dim:
        raise ValueError(f"model {cfg.model} expects d={model.cfg.d_in}, the store has d={sub.dim}")
    record = manifest.start("pointer.gen", params, inputs, seed=cfg.proposal.seed)
    cands = propose(
        model, torch.from_numpy(sub.query_emb), torch.from_numpy(sub.cand_emb), cfg.proposal
    )

    items = [
        (q, [demos[pool[c.pointer[0]]], demos[pool[c.pointer[1]]]])
        for q, pool, cs in zip(queries, sub.cand_ids, cands, strict=True)
        for c in cs
    ]
    model_vqa = vqa_model if vqa_model is not None else vqa_eval.resolve_vqa(cfg.vqa)
    source = vqa_eval.vqa_source(model_vqa)
    if cfg.dry_run:
        return {
            "queries": len(queries),
            "candidates": len(items),
            **vqa_eval.plan(model_vqa, items),
            **source,
        }
    outcomes = vqa_eval.evaluate(
        model_vqa, items, metric=cfg.metric, threshold=cfg.correct_threshold, progress=cfg.progress
    )
    for c, o in zip((c for cs in cands for c in cs), outcomes, strict=True):
        _record_outcome(c, o)

    raw = [
        records.query_record(q, pool, cs)
        for q, pool, cs in zip(queries, sub.cand_ids, cands, strict=True)
    ]
    io.write_text(cfg.out, jsonl(raw))
    methods = Counter(c.gen_method for cs in cands for c in cs)
    failed = Counter(c.eval_error for cs in cands for c in cs if c.eval_failed)
    record.rows_in, record.rows_out = len(queries), len(raw)
    record.notes = {"candidates": dict(methods), "eval_failed": dict(failed), **source}
    if hasattr(model_vqa, "usage"):
        record.backend_calls = dict(model_vqa.usage())  # calls, failures and cost per site
    manifest.write(cfg.out, record)
    correct = [c.vqa_correct for cs in cands for c in cs if not c.eval_failed]
    return {
        "out": str(cfg.out),
        "queries": len(raw),
        "candidates": sum(methods.values()),
        **{f"candidates/{m}": methods.get(m, 0) for m in records.GEN_METHODS},
        "eval_failed": sum(failed.values()),
        "mean correct": round(sum(correct) / len(correct), 4) if correct else None,
        **source,
    }


def _record_outcome(c: PointerCandidate, o: vqa_eval.Outcome) -> None:
    c.vqa_pred_answer, c.vqa_acc_score, c.vqa_correct = o.pred_answer, o.acc_score, o.correct
    c.eval_failed, c.eval_error = o.eval_failed, o.eval_error
