"""The optimisation loop ``train value`` and ``train value-sft`` share: draw each step's global
batch, accumulate its micro-batches, clip, step, average the metrics over the ranks, evaluate the
held-out prompts and log (seed 004's sampling; the losses are each command's own)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ddai.trainer.value import losses as vl
from ddai.trainer.value.config import ValueFitConfig
from ddai.trainer.value.data import TokenRollout
from ddai.trainer.value.rows import Split

StepLoss = Callable[[Any, Split, list[int], Any, int], tuple[torch.Tensor, dict[str, float]]]


def drawn_rows(data: Split, idx: list[int], cfg: ValueFitConfig) -> list[TokenRollout]:
    """The training rollouts of a step's draw ``idx``: the drawn pairs' successes, then their
    failures (``losses.stacked_pairs_loss``'s layout), or with ``pairwise_coef`` 0 the drawn
    rollouts themselves."""
    if cfg.pairwise_coef > 0:
        pairs = [data.train_pairs[i] for i in idx]
        return [data.train[p] for p, _ in pairs] + [data.train[n] for _, n in pairs]
    return [data.train[i] for i in idx]


def fit_value_loss(
    values: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor, cfg: ValueFitConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """The value loss of ``drawn_rows``' values ``[B, T]`` (completion-aligned, ``mask`` the
    policy tokens) against their MC ``targets[B]``: the hybrid on the stacked pairs, or with
    ``pairwise_coef`` 0 the tokenwise MC MSE alone, unscaled (``value/loss`` is that MSE)."""
    if cfg.pairwise_coef > 0:
        return vl.stacked_pairs_loss(
            values, mask, targets, pairwise_coef=cfg.pairwise_coef, mc_coef=cfg.mc_coef
        )
    loss, metrics = vl.mc_value_loss(values, targets, torch.ones_like(mask), mask)
    return loss, {**metrics, "value/loss": metrics["value/mc_mse"]}


def fit_steps(
    *,
    model: Any,
    opt: torch.optim.Optimizer,
    acc: Any,
    data: Split,
    cfg: ValueFitConfig,
    step_loss: StepLoss,
    pad_id: int,
    grad_clip: float,
    held_out: Callable[[], dict[str, float]],
    log: Any,
    label: str,
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Train ``cfg.max_steps`` optimizer steps; returns each step's metrics (averaged over
    micro-batches and ranks, with the evaluation of that step when there was one) and the last
    held-out evaluation. ``log`` is the main process's ``MetricsLog`` (None on other ranks)."""
    from ddai.pipelines.records.progress import bar
    from ddai.trainer.runtime import accel

    params = [p for g in opt.param_groups for p in g["params"]]
    main = acc.is_main_process
    # One draw per optimizer step of the global batch (batch_size × processes × grad_accum) from
    # the shared seed, each micro-batch of each rank a slice of it: the data a step sees does not
    # depend on how it is split. Dropout, the only randomness inside a rank, gets the rank's seed.
    gen = torch.Generator().manual_seed(cfg.seed)
    accel.rank_seed(cfg.seed, acc)
    B, world, rank = cfg.batch_size, acc.num_processes, acc.process_index
    history: list[dict[str, float]] = []
    evaluated: dict[str, float] = {}
    model.train()
    with bar(label, cfg.max_steps, enabled=cfg.progress and main) as advance:
        for step in range(1, cfg.max_steps + 1):
            draw = torch.multinomial(
                data.weights, B * world * cfg.grad_accum, replacement=True, generator=gen
            )
            seen = []
            for micro in range(cfg.grad_accum):
                start = (micro * world + rank) * B
                with acc.accumulate(model):
                    loss, m = step_loss(model, data, draw[start : start + B].tolist(), cfg, pad_id)
                    acc.backward(loss)  # divided by grad_accum
                    if grad_clip > 0 and acc.sync_gradients:
                        acc.clip_grad_norm_(params, grad_clip)
                    opt.step()  # a no-op until the last micro-batch
                    opt.zero_grad(set_to_none=True)
                seen.append(m)
            metrics = accel.mean_metrics(
                {k: sum(s[k] for s in seen) / len(seen) for k in seen[0]}, acc
            )
            history.append(metrics)
            if step % cfg.eval_steps == 0 or step == cfg.max_steps:
                evaluated = held_out()
                metrics.update(evaluated)
            if main:
                log.log(step, metrics)
            advance(1)
    return history, evaluated


def fit_with_held_out(
    *,
    model: Any,
    acc: Any,
    data: Split,
    cfg: ValueFitConfig,
    out: Path,
    step_loss: StepLoss,
    pad_id: int,
    grad_clip: float,
    evaluate: Callable[..., dict[str, float]],
    label: str,
    command: str,
) -> tuple[Any, dict[str, float], list[dict[str, float]], dict[str, float]]:
    """AdamW over ``model.param_groups`` (trunk and head learning rates), both prepared by
    ``acc``; ``out/run_config.json`` for ``command`` and the metrics log in ``out``; then
    ``fit_steps`` between two evaluations of the held-out prompts (``evaluate(bare, val,
    val_pairs, pad_id, batch_size=…)``, the one before logged as step 0). Returns the bare
    (unwrapped) model, the evaluation before, each step's metrics and the evaluation after."""
    from ddai.trainer.runtime import accel
    from ddai.trainer.runtime.metrics_log import METRICS_FILE, MetricsLog

    opt = torch.optim.AdamW(
        model.param_groups(trunk_lr=cfg.trunk_lr, head_lr=cfg.head_lr),
        weight_decay=cfg.weight_decay,
    )
    model, opt = acc.prepare(model, opt)
    bare = acc.unwrap_model(model)
    main = acc.is_main_process
    log = MetricsLog(out / METRICS_FILE) if main else None
    accel.write_run_config(out, cfg, acc, command=command)

    def held_out() -> dict[str, float]:
        # Main process only, on the bare module: no collective, the other ranks go on.
        if not main:
            return {}
        return evaluate(bare, data.val, data.val_pairs, pad_id, batch_size=cfg.eval_batch_size)

    eval_before = held_out()
    if main:
        log.log(0, eval_before)
    history, eval_after = fit_steps(
        model=model,
        opt=opt,
        acc=acc,
        data=data,
        cfg=cfg,
        step_loss=step_loss,
        pad_id=pad_id,
        grad_clip=grad_clip,
        held_out=held_out,
        log=log,
        label=label,
    )
    return bare, eval_before, history, eval_after
