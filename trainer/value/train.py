"""``ddai train value``: fit a value head on terminal outcomes from the rollout log (seed 004).

Each step draws ``batch_size`` success/failure pairs (uniformly, or by difficulty-bin weight)
from the training prompts and minimizes ``pairwise_coef · pairwise + mc_coef · MC-MSE``; with
``pairwise_coef = 0`` it draws single rollouts and fits the MC targets alone. Held-out prompts
are scored before training, every ``eval_steps`` and at the end: pairwise accuracy (v⁺ > v⁻ on
their pairs), AUC of the sequence-mean value against success, and the tokenwise MC MSE.

Metrics go to ``<out>/metrics.jsonl`` (``value/pairwise_loss``, ``value/mc_mse``, ``value/loss``,
``value/pairwise_acc``, ``value/eval_pairwise_acc``, ``value/eval_auc``, ``value/eval_mc_mse``);
the checkpoint to ``<out>`` (``ddai.trainer.value.model``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddai.trainer.value import losses as vl
from ddai.trainer.value.config import ValueTrainConfig
from ddai.trainer.value.data import TokenRollout, collate
from ddai.trainer.value.loop import drawn_rows, fit_value_loss, fit_with_held_out
from ddai.trainer.value.model import (
    ValueModel,
    is_value_checkpoint,
    load_value_model,
    new_value_model,
)
from ddai.trainer.value.rows import (
    Split,
    resolve_split,
    split_data,
    tokenize_rows,
    training_rows,
    write_split,
)


@dataclass
class ValueTrainResult:
    output_dir: str
    head: str
    unfreeze: int
    rollouts: int
    dropped: dict[str, int]
    train_prompts: int
    val_prompts: int
    train_pairs: int
    val_pairs: int
    split_seed: int
    held_out_digest: str
    """Names the held-out prompts (``split.json`` lists them): value-sft from this critic
    evaluates on the same ones."""
    steps: int
    loss_first: float | None
    loss_last: float | None
    eval_before: dict[str, float]
    eval_after: dict[str, float]
    turns_incomplete: int = 0
    """Rollouts of the selected runs flagged ``turns_incomplete``: left out of training (and
    counted in ``dropped``), or trained on with ``--include-incomplete``."""
    include_incomplete: bool = False
    """Whether they were trained on."""


# ---------------------------------------------------------------------------- scoring


@torch.no_grad()
def sequence_values(
    model: ValueModel, items: Sequence[TokenRollout], pad_id: int, *, batch_size: int = 16
) -> list[torch.Tensor]:
    """Completion-aligned values of each rollout, ``[T_i]`` per item (eval mode, no gradient)."""
    was_training = model.training
    model.eval()
    dev = next(model.head.parameters()).device
    out: list[torch.Tensor] = []
    for i in range(0, len(items), batch_size):
        chunk = items[i : i + batch_size]
        b = collate(chunk, pad_id).to(dev)
        v = model.completion_values(b.input_ids, b.attention_mask, b.prompt_len).float().cpu()
        out.extend(v[j, : len(r.completion_ids)] for j, r in enumerate(chunk))
    model.train(was_training)
    return out


def evaluate(
    model: ValueModel,
    items: Sequence[TokenRollout],
    pairs: Sequence[tuple[int, int]],
    pad_id: int,
    *,
    batch_size: int = 16,
) -> dict[str, float]:
    """Held-out quality: ``value/eval_pairwise_acc``, ``value/eval_auc`` (sequence-mean value vs
    success) and ``value/eval_mc_mse`` (tokenwise, against each rollout's MC target)."""
    if not items:
        return {}
    values = sequence_values(model, items, pad_id, batch_size=batch_size)
    means = torch.stack(
        [
            vl.sequence_mean(v[None], torch.tensor(r.mask)[None])[0]
            for v, r in zip(values, items, strict=True)
        ]
    )
    sq = sum(
        float((((v - r.target) ** 2) * torch.tensor(r.mask)).sum())
        for v, r in zip(values, items, strict=True)
    )
    n_tok = sum(sum(r.mask) for r in items)
    pos = torch.tensor([p for p, _ in pairs], dtype=torch.long)
    neg = torch.tensor([n for _, n in pairs], dtype=torch.long)
    return {
        "value/eval_pairwise_acc": vl.pairwise_accuracy(means[pos], means[neg])
        if pairs
        else float("nan"),
        "value/eval_auc": vl.roc_auc(means, torch.tensor([r.success for r in items])),
        "value/eval_mc_mse": sq / max(n_tok, 1),
    }


# ---------------------------------------------------------------------------- training


def _load(cfg: ValueTrainConfig) -> tuple[ValueModel, Any]:
    if is_value_checkpoint(cfg.model):
        model, tok = load_value_model(cfg.model, unfreeze=cfg.unfreeze, dtype=cfg.dtype)
        if cfg.head is not None and cfg.head != model.head_type:
            raise ValueError(
                f"--head {cfg.head}: {cfg.model} holds a head of type {model.head_type}; drop --head to "
                "continue it, or start from the base model for a new head"
            )
        if cfg.dropout is not None and (model.head_type != "mlp" or cfg.dropout != model.dropout):
            held = (
                f"an mlp head with dropout {model.dropout:g}"
                if model.head_type == "mlp"
                else "a linear head, which has no dropout"
            )
            raise ValueError(
                f"--dropout {cfg.dropout:g}: {cfg.model} holds {held}; drop --dropout to "
                "continue it, or start from the base model for a new head"
            )
        return model, tok
    head = cfg.head or "linear"
    if cfg.dropout is not None and head == "linear":
        raise ValueError(f"--dropout {cfg.dropout:g}: a linear head has no dropout; drop it")
    return new_value_model(
        cfg.model,
        head_type=head,
        unfreeze=2 if cfg.unfreeze is None else cfg.unfreeze,
        dropout=0.1 if cfg.dropout is None else cfg.dropout,
        dtype=cfg.dtype,
        seed=cfg.seed,
    )


def step_loss(
    model: ValueModel, data: Split, idx: list[int], cfg: ValueTrainConfig, pad_id: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one step on the drawn pairs (or rollouts, in MC-only mode) ``idx``. ``model``
    may be DDP-wrapped: values go through its ``forward`` so the wrapper syncs the gradients."""
    dev = next(model.parameters()).device
    rows = drawn_rows(data, idx, cfg)
    batch = collate(rows, pad_id).to(dev)
    values = model(batch.input_ids, batch.attention_mask)[:, batch.prompt_len - 1 : -1]
    targets = torch.tensor([r.target for r in rows], device=dev)
    return fit_value_loss(values, batch.mask, targets, cfg)


def train_value(cfg: ValueTrainConfig) -> ValueTrainResult:
    """Train (or continue) a value head on the log's outcomes and save it to ``output_dir``.

    Under ``accelerate launch`` each process trains on its ``batch_size`` pairs of every step's
    global draw and the DDP-wrapped model averages the gradients; the main process alone
    evaluates the held-out prompts, writes the metrics (losses averaged over the ranks) and saves."""
    from ddai.pipelines.records.progress import bar
    from ddai.trainer.common import hf_progress
    from ddai.trainer.runtime import accel
    from ddai.trainer.value.model import save_value_model

    cfg.check()
    hf_progress(cfg.progress)
    rows, incomplete = training_rows(cfg)
    acc = accel.make_accelerator(gradient_accumulation_steps=cfg.grad_accum)
    main = acc.is_main_process
    torch.manual_seed(cfg.seed)  # the same fresh head on every rank
    model, tok = _load(cfg)
    pad_id = tok.pad_token_id
    with bar("tokenizing", len(rows), enabled=cfg.progress and main) as advance:
        tokenized = tokenize_rows(rows, tok, cfg, progress=advance)
    if not tokenized.rollouts:
        raise ValueError(
            f"no rollout left to learn from (dropped: {tokenized.dropped}); raise --max-length, or "
            "pass a shorter --system-prompt"
        )
    split = resolve_split(tokenized.rollouts, cfg)
    data = split_data(tokenized.rollouts, cfg, split, tokenized.dropped)
    bare, eval_before, history, eval_after = fit_with_held_out(
        model=model,
        acc=acc,
        data=data,
        cfg=cfg,
        out=Path(cfg.output_dir),
        step_loss=step_loss,
        pad_id=pad_id,
        grad_clip=cfg.grad_clip,
        evaluate=evaluate,
        label="value head",
        command="train value",
    )
    losses = [m["value/loss"] for m in history]
    acc.wait_for_everyone()
    if main:
        save_value_model(bare, tok, cfg.output_dir, source=cfg.model)
        write_split(cfg.output_dir, split)
    acc.wait_for_everyone()
    model = bare
    return ValueTrainResult(
        output_dir=str(cfg.output_dir),
        head=model.head_type,
        unfreeze=model.unfreeze,
        rollouts=len(tokenized.rollouts),
        dropped={
            **tokenized.dropped,
            **(
                {"turns_incomplete": incomplete}
                if incomplete and not cfg.include_incomplete
                else {}
            ),
        },
        train_prompts=len({r.uid for r in data.train}),
        val_prompts=len({r.uid for r in data.val}),
        train_pairs=len(data.train_pairs),
        val_pairs=len(data.val_pairs),
        split_seed=split.seed,
        held_out_digest=split.digest,
        steps=cfg.max_steps,
        loss_first=losses[0] if losses else None,
        loss_last=losses[-1] if losses else None,
        eval_before=eval_before,
        eval_after=eval_after,
        turns_incomplete=incomplete,
        include_incomplete=cfg.include_incomplete,
    )
