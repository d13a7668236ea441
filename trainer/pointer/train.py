"""``ddai pointer train``: supervised training from labels, then RL phases on generated data
(seed 002 §4): RCE warm-up with a temperature schedule, then the clipped group advantage (seed
002's "GRPO": PPO ratio against the stored ``old_log_probs``) or REINFORCE++, e.g.
``--phases rce:1,clipped-group:3`` in one run.

Batches are whole query groups (``batch_queries`` queries with all their candidates), so the
group-relative quantities (RCE weights) are exact inside a batch; advantages are computed once
per phase over all rows.

The settings (``PointerTrainConfig``, ``OptimConfig``, ``RLConfig``, the phase grammar) live in
``ddai.trainer.pointer.config``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ddai.pipelines.pointer.store import load_store
from ddai.pipelines.pointer.world import LABELS_FILE, load_world
from ddai.pipelines.records.deps import pl
from ddai.pipelines.records.progress import bar
from ddai.pipelines.store import io, manifest
from ddai.trainer.pointer import losses
from ddai.trainer.pointer.config import (
    CLIPPED_GROUP,
    RL_MODES,
    OptimConfig,
    PointerTrainConfig,
    RLConfig,
    parse_phases,  # noqa: F401  (re-exported: the phases grammar is part of this entry)
)
from ddai.trainer.pointer.data import (
    GroupedRows,
    check_rows,
    check_signal,
    flat_groups,
    grouped_rows,
    label_pointers,
    nearest_labels,
)
from ddai.trainer.pointer.model import (
    WEIGHTS_FILE,
    PointerConfig,
    PointerSelector,
    load_pointer,
    save_pointer,
)

log = logging.getLogger(__name__)


def _step(
    model: Any, opt: torch.optim.Optimizer, loss: Tensor, grad_clip: float, acc: Any = None
) -> None:
    opt.zero_grad(set_to_none=True)
    if acc is None:
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    else:
        acc.backward(loss)
        if grad_clip > 0:
            acc.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()


def _shard(items: Tensor, acc: Any) -> tuple[Tensor, float]:
    """This rank's share of a global batch (every world-th item) and its loss weight
    ``n_rank · world / n``, so that DDP's mean of the ranks' gradients is the gradient of the
    global batch's mean loss. A rank left with nothing reuses one item at weight 0: it still
    takes part in the gradient all-reduce."""
    if acc is None or acc.num_processes == 1:
        return items, 1.0
    world = acc.num_processes
    mine = items[acc.process_index :: world]
    if mine.numel() == 0:
        return items[:1], 0.0
    return mine, mine.numel() * world / items.numel()


def _prepare(model: PointerSelector, optim: OptimConfig, acc: Any) -> tuple[Any, Any]:
    """The model and its Adam optimizer, DDP-wrapped across processes (unchanged on one)."""
    opt = torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)
    if acc is None or acc.num_processes == 1:
        return model, opt
    return acc.prepare(model, opt)


def _epoch_metrics(seen: list[dict[str, float]], acc: Any) -> dict[str, float]:
    """Each metric's mean over the epoch's steps that report it, then over the ranks."""
    from ddai.trainer.runtime import accel

    keys = sorted({k for m in seen for k in m})
    mean = {k: sum(m[k] for m in seen if k in m) / sum(k in m for m in seen) for k in keys}
    return mean if acc is None else accel.mean_metrics(mean, acc)


def fit_sft(
    model: PointerSelector,
    query_emb: Tensor,
    cand_emb: Tensor,
    store_row: Tensor,
    pointers: Tensor,
    *,
    epochs: int,
    optim: OptimConfig,
    progress: bool = False,
    accelerator: Any = None,
) -> list[dict[str, Any]]:
    """Cross-entropy on labeled pointers. ``query_emb [N, d]``, ``cand_emb [N, K, d]`` (the
    store), ``store_row [L]`` and ``pointers [L, 2]`` the labeled examples. With an
    ``accelerator`` over several processes, every rank draws the same shuffled batches and
    trains on its share of each (DDP averages the gradients)."""
    gen = torch.Generator().manual_seed(optim.seed)
    acc = accelerator
    train, opt = _prepare(model, optim, acc)
    n, bs = store_row.numel(), optim.batch_queries
    history = []
    model.train()
    with bar("sft", epochs * ((n + bs - 1) // bs), enabled=progress) as advance:
        for epoch in range(epochs):
            seen = []
            for batch in torch.randperm(n, generator=gen).split(bs):
                idx, weight = _shard(batch, acc)
                rows = store_row[idx]
                logp = train(query_emb[rows], cand_emb[rows], pointers[idx])
                loss, metrics = losses.sft_loss(logp)
                _step(train, opt, loss * weight, optim.grad_clip, acc)
                seen.append(metrics)
                advance(1)
            history.append({"phase": 0, "mode": "sft", "epoch": epoch, **_epoch_metrics(seen, acc)})
    return history


@torch.no_grad()
def _policy_logp(
    model: PointerSelector, query_emb: Tensor, cand_emb: Tensor, data: GroupedRows
) -> Tensor:
    model.eval()
    rows = data.store_row
    out = model.sequence_log_prob(query_emb[rows], cand_emb[rows], data.pointers)
    model.train()
    return out


def fit_rl(
    model: PointerSelector,
    query_emb: Tensor,
    cand_emb: Tensor,
    data: GroupedRows,
    phases: list[tuple[str, int]],
    *,
    optim: OptimConfig,
    rl: RLConfig,
    progress: bool = False,
    accelerator: Any = None,
) -> list[dict[str, Any]]:
    """Run RL phases in order on grouped rows (one optimizer across phases). With an
    ``accelerator`` over several processes, each rank trains on its share of every batch's query
    groups (whole groups, so group-relative quantities stay exact)."""
    gen = torch.Generator().manual_seed(optim.seed)
    acc = accelerator
    train, opt = _prepare(model, optim, acc)
    g, bs = data.n_groups, optim.batch_queries
    steps_per_epoch = (g + bs - 1) // bs
    groups_rows = [torch.arange(int(data.starts[i]), int(data.starts[i + 1])) for i in range(g)]
    normed = losses.group_normalize(data.rewards, data.group, rl.norm)
    if rl.old_logp == "stored" and torch.isnan(data.old_logp).any():
        raise ValueError("some rows have no logprob_score; pass old_logp='phase' to recompute them")
    history: list[dict[str, Any]] = []
    model.train()
    total = sum(e for _, e in phases) * steps_per_epoch
    with bar("rl", total, enabled=progress) as advance:
        for p, (mode, epochs) in enumerate(phases):
            if mode not in RL_MODES:
                raise ValueError(f"fit_rl runs {', '.join(RL_MODES)}; got {mode!r}")
            adv = None
            if mode != "rce":
                adv = losses.get_advantage(mode)(
                    data.rewards, data.group, norm=rl.norm, clip=rl.adv_clip
                )
            old = data.old_logp
            if rl.old_logp == "phase":
                old = _policy_logp(model, query_emb, cand_emb, data)
            step, phase_steps = 0, epochs * steps_per_epoch
            for epoch in range(epochs):
                if rl.old_logp == "epoch":
                    old = _policy_logp(model, query_emb, cand_emb, data)
                seen = []
                for batch in torch.randperm(g, generator=gen).split(bs):
                    # Weighted by groups: exact for the global mean when groups are equal-sized.
                    mine, weight = _shard(batch, acc)
                    rows = torch.cat([groups_rows[i] for i in mine.tolist()])
                    sr = data.store_row[rows]
                    logp = train(query_emb[sr], cand_emb[sr], data.pointers[rows])
                    if mode == "rce":
                        t = losses.rce_temperature(
                            step, phase_steps, start=rl.rce_t_start, end=rl.rce_t_end
                        )
                        loss, metrics = losses.rce_loss(
                            logp, normed[rows], data.group[rows], temperature=t
                        )
                    elif mode == CLIPPED_GROUP:
                        loss, metrics = losses.clipped_group_loss(
                            logp, old[rows], adv[rows], clip_eps=rl.clip_eps, kl_coef=rl.kl_coef
                        )
                    else:
                        loss, metrics = losses.reinforcepp_loss(
                            logp,
                            adv[rows],
                            old_logp=old[rows] if rl.reinforcepp_clip else None,
                            clip_eps=rl.clip_eps if rl.reinforcepp_clip else None,
                            kl_coef=rl.kl_coef,
                        )
                    _step(train, opt, loss * weight, optim.grad_clip, acc)
                    seen.append(metrics)
                    step += 1
                    advance(1)
                history.append(
                    {"phase": p, "mode": mode, "epoch": epoch, **_epoch_metrics(seen, acc)}
                )
    return history


# ---------------------------------------------------------------- the command


def run_train(cfg: PointerTrainConfig) -> dict[str, Any]:
    """Train and write ``out/model.safetensors``, ``config.json``, ``history.jsonl`` + manifest.

    Under ``accelerate launch`` (CPU processes: the selector is small) every rank starts from the
    same weights, trains DDP-wrapped on its share of each batch, and the main process alone shows
    progress and writes the outputs."""
    from ddai.trainer.runtime import accel

    cfg.check()
    acc = accel.make_accelerator(cpu=True)
    main = acc.is_main_process
    torch.manual_seed(cfg.optim.seed)
    store = load_store(cfg.store)
    q_all, c_all = torch.from_numpy(store.query_emb), torch.from_numpy(store.cand_emb)
    if cfg.init is not None:
        model = load_pointer(cfg.init)
        if model.cfg.d_in != store.dim:
            raise ValueError(
                f"--init {cfg.init} expects d={model.cfg.d_in}, the store has d={store.dim}"
            )
    else:
        model = PointerSelector(
            PointerConfig(d_in=store.dim, d_model=cfg.d_model, scoring=cfg.scoring)
        )
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    inputs: list[Path] = [cfg.store]
    inputs += [cfg.data] if cfg.data is not None else []
    inputs += [cfg.init / WEIGHTS_FILE] if cfg.init is not None else []
    params = {
        "phases": [list(p) for p in cfg.phases],
        "split": cfg.split,
        "d_model": cfg.d_model,
        "scoring": cfg.scoring,
        "optim": asdict(cfg.optim),
        "rl": asdict(cfg.rl),
    }
    summary: dict[str, Any] = {
        "out": str(cfg.out),
        "phases": ",".join(f"{m}:{e}" for m, e in cfg.phases),
    }
    if cfg.is_sft:
        world = load_world(cfg.world, embeddings=False)
        labels = world.labels
        if (cfg.world / LABELS_FILE).is_file():
            inputs.append(cfg.world / LABELS_FILE)
        else:  # a user's VQA set (`pointer world --from`) has no labels: learn the nearest two
            labels = nearest_labels(store)
            summary["labels"] = "each query's two nearest candidates (the world has none)"
        record = manifest.start("pointer.train", params, inputs, seed=cfg.optim.seed)
        ids = [q["query_id"] for q in world.queries if q.get("split") == cfg.split]
        rows, ptrs, dropped = label_pointers(labels, store, ids)
        if rows.numel() == 0:
            raise ValueError(
                f"no labeled {cfg.split!r} query has both labeled demonstrations in its pool"
            )
        history = fit_sft(
            model,
            q_all,
            c_all,
            rows,
            ptrs,
            epochs=cfg.phases[0][1],
            optim=cfg.optim,
            progress=cfg.progress and main,
            accelerator=acc,
        )
        record.rows_in, record.rows_out = rows.numel() + dropped, rows.numel()
        record.drop("label not in pool or missing", dropped)
        summary |= {"examples": rows.numel(), "dropped": dropped}
    else:
        record = manifest.start("pointer.train", params, inputs, seed=cfg.optim.seed)
        data = grouped_rows(check_rows(pl.read_parquet(cfg.data), cfg.data), store)
        flat = flat_groups(data)
        warning = check_signal(flat, cfg.data)
        if warning and main:
            log.warning("--data %s: %s", cfg.data, warning)
        history = fit_rl(
            model,
            q_all,
            c_all,
            data,
            list(cfg.phases),
            optim=cfg.optim,
            rl=cfg.rl,
            progress=cfg.progress and main,
            accelerator=acc,
        )
        record.rows_in = record.rows_out = data.pointers.shape[0]
        summary |= {
            "rows": data.pointers.shape[0],
            "queries": data.n_groups,
            "queries without reward variance": flat["flat"],
            **({"warning": warning} if warning else {}),
        }
        for h in history:  # the share each epoch trained on (the groups are the data's)
            h["rl/flat_group_share"] = flat["flat"] / flat["groups"]
        record.notes = {"flat_groups": flat}
    changed = sum(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    record.notes = {
        **(record.notes or {}),
        "final": history[-1] if history else {},
        "tensors_changed": changed,
        "processes": acc.num_processes,
    }
    acc.wait_for_everyone()
    if main:
        save_pointer(model, cfg.out, metadata={"phases": summary["phases"]})
        io.write_text(cfg.out / "history.jsonl", "".join(json.dumps(h) + "\n" for h in history))
        manifest.write(cfg.out / WEIGHTS_FILE, record)
    acc.wait_for_everyone()
    last = history[-1] if history else {}
    return summary | {
        "tensors changed": changed,
        **{k: round(v, 4) for k, v in last.items() if isinstance(v, float)},
    }
