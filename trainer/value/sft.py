"""``ddai train value-sft``: seed 004's joint stage (``verifiable_mc_hybrid``).

The policy (a causal LM) and a trained critic (a ``ddai train value`` checkpoint, head type read
from it) share one trunk. Each step draws success/failure pairs of the same prompt (by
difficulty-bin weight when bins are given) and minimizes

    weighted_ce + value_loss_coef · (pairwise_coef · pairwise + mc_coef · MC-MSE)

where ``weighted_ce`` is the policy's CE on the *correct* rollouts' policy tokens, each token
weighted by ``w_t = clip(exp(δ_t/β), min, max)`` from the critic's TD error (``trainer.
value.sft_math``). The CE reaches the LM head only at those tokens, a chunk of positions at a time
in the model's dtype (``sft_math.chunked_token_ce``): no ``[B, L, V]`` logits, no float32 copy.
Trunk and head have their own learning rates; gradients are clipped to
``max_grad_norm``. With ``value_trunk_grad`` off the value loss trains the head alone (detached
hidden states), as the seed's ``num_unfrozen_layers: 0``.

The critic's trunk, when it was trained (``trunk/`` inside the checkpoint), replaces the policy's
transformer body before training: the seed starts the joint stage from the critic checkpoint.

Outputs in ``<out>``: the policy (a causal LM folder other commands load), ``critic/`` (a value
checkpoint whose trunk is that policy), ``metrics.jsonl`` (``joint/weighted_ce``,
``joint/weight_mean``, ``joint/clip_low``, ``joint/clip_high``, ``joint/loss``, ``value/*``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ddai.trainer.value import sft_math as vsm
from ddai.trainer.value.config import ValueSFTConfig
from ddai.trainer.value.data import Batch, collate
from ddai.trainer.value.loop import drawn_rows, fit_value_loss, fit_with_held_out
from ddai.trainer.value.model import (
    HEAD_FILE,
    TRUNK_DIR,
    ValueModel,
    build_head,
    read_config,
    save_value_model,
)
from ddai.trainer.value.rows import Split
from ddai.trainer.vlm_inputs import text_positions

CRITIC_DIR = "critic"


class JointModel(nn.Module):
    """A causal LM and a value head on its last hidden states (one trunk, two heads)."""

    def __init__(self, lm: nn.Module, head: nn.Module, *, head_type: str, dropout: float,
                 value_trunk_grad: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.lm = lm
        self.head = head
        self.head_type = head_type
        self.dropout = dropout
        self.value_trunk_grad = value_trunk_grad

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        prompt_len: int | None = None,
        ce_mask: Tensor | None = None,
    ) -> tuple[Tensor | None, Tensor]:
        """``(ce, values[B,L])``: ``values[:, i]`` values the state after token ``i``; ``ce``
        ``[B, L − prompt_len]`` is the cross-entropy of each completion token where ``ce_mask``
        is set (0 elsewhere; None without ``prompt_len``), computed by
        ``sft_math.chunked_token_ce`` without the full ``[B, L, V]`` logits."""
        hidden = self.lm.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=text_positions(attention_mask),  # left padding does not shift them
            use_cache=False,
        ).last_hidden_state
        h = hidden if self.value_trunk_grad else hidden.detach()
        values = self.head(h.float())
        if prompt_len is None:
            return None, values
        P = prompt_len
        targets = input_ids[:, P:]
        mask = torch.ones_like(targets) if ce_mask is None else ce_mask
        ce = vsm.chunked_token_ce(
            hidden[:, P - 1 : -1], self.lm.get_output_embeddings(), targets, mask
        )
        return ce, values

    def completion_values(
        self, input_ids: Tensor, attention_mask: Tensor, prompt_len: int
    ) -> Tensor:
        """``[B, T − prompt_len]`` values aligned to completion tokens (as ``ValueModel``)."""
        return self(input_ids, attention_mask)[1][:, prompt_len - 1 : -1]

    def param_groups(self, *, trunk_lr: float, head_lr: float) -> list[dict[str, Any]]:
        return [
            {"params": list(self.head.parameters()), "lr": head_lr, "name": "head"},
            {"params": list(self.lm.parameters()), "lr": trunk_lr, "name": "trunk"},
        ]


def load_joint(cfg: ValueSFTConfig) -> tuple[JointModel, Any]:
    """``(JointModel, tokenizer)``: the policy ``cfg.model`` with the critic's head (type from the
    checkpoint) and, when the critic trained its trunk, the critic's trunk weights."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoModelForCausalLM

    from ddai.trainer.modeling import DTYPES, found_model, load_tokenizer

    if cfg.dtype not in DTYPES:
        raise ValueError(f"--dtype {cfg.dtype!r}: use one of {', '.join(DTYPES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    crit = read_config(cfg.critic)
    torch_dtype = "auto" if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
    with found_model(cfg.model):
        lm = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch_dtype)
    hidden = int(lm.config.hidden_size)
    if hidden != crit.hidden_size:
        raise ValueError(
            f"--critic {cfg.critic} has hidden size {crit.hidden_size} but --model {cfg.model} has "
            f"{hidden}; train the critic on this policy's trunk (`ddai train value --model ...`)"
        )
    tok = load_tokenizer(cfg.model)
    if load_tokenizer(cfg.critic).get_vocab() != tok.get_vocab():
        raise ValueError(
            f"--critic {cfg.critic} uses another tokenizer than --model {cfg.model}; train the "
            "critic on this policy's model (`ddai train value --model ...`)"
        )
    if crit.trunk == TRUNK_DIR:
        trunk = AutoModel.from_pretrained(str(Path(cfg.critic) / TRUNK_DIR), dtype=torch_dtype)
        lm.base_model.load_state_dict(trunk.state_dict())
    head = build_head(crit.head_type, hidden, dropout=crit.dropout)
    head.load_state_dict(load_file(str(Path(cfg.critic) / HEAD_FILE)))
    model = JointModel(
        lm,
        head,
        head_type=crit.head_type,
        dropout=crit.dropout,
        value_trunk_grad=cfg.value_trunk_grad,
    )
    return model, tok


def step_loss(
    model: nn.Module, data: Split, idx: list[int], cfg: ValueSFTConfig, pad_id: int
) -> tuple[Tensor, dict[str, float]]:
    """The joint loss on the drawn pairs (or rollouts when ``pairwise_coef`` is 0) ``idx``;
    ``model`` may be DDP-wrapped (the forward goes through it)."""
    dev = next(model.parameters()).device
    rows = drawn_rows(data, idx, cfg)
    batch: Batch = collate(rows, pad_id).to(dev)
    P = batch.prompt_len
    correct = torch.tensor([r.success for r in rows], device=dev)
    ce_mask = batch.mask.to(torch.float32) * correct.to(torch.float32)[:, None]
    ce, values = model(batch.input_ids, batch.attention_mask, P, ce_mask)
    values = values[:, P - 1 : -1]
    targets = torch.tensor([r.target for r in rows], device=dev, dtype=values.dtype)
    value_loss, metrics = fit_value_loss(values, batch.mask, targets, cfg)
    if cfg.pairwise_coef == 0:  # the joint loss scales the MC term alone too
        value_loss = cfg.mc_coef * value_loss
        metrics["value/loss"] = float(value_loss.detach())
    w, ce_mask = vsm.td_weights(values, targets, batch.mask, correct, cfg.weights_cfg)
    wce = vsm.weighted_ce(ce, w, ce_mask)
    loss = vsm.joint_loss(wce, value_loss, cfg.value_loss_coef)
    metrics.update(vsm.weight_stats(w, ce_mask, cfg.weights_cfg))
    metrics["joint/weighted_ce"] = float(wce.detach())
    metrics["joint/ce"] = float((ce.detach() * ce_mask).sum() / ce_mask.sum().clamp(min=1.0))
    metrics["joint/loss"] = float(loss.detach())
    return loss, metrics


@dataclass
class ValueSFTResult:
    output_dir: str
    critic_dir: str
    head: str
    rollouts: int
    train_prompts: int
    val_prompts: int
    train_pairs: int
    split_seed: int
    split_source: str
    """``critic``: the held-out prompts the critic recorded (split.json); ``computed``: drawn
    from --split-seed (a critic without a record)."""
    held_out_digest: str
    steps: int
    weighted_ce_first: float | None
    weighted_ce_last: float | None
    value_loss_first: float | None
    value_loss_last: float | None
    weight_mean_last: float | None
    eval_before: dict[str, float]
    eval_after: dict[str, float]
    turns_incomplete: int = 0
    """Rollouts of the selected runs flagged ``turns_incomplete``: left out of training, or
    trained on with ``--include-incomplete``."""
    include_incomplete: bool = False
    """Whether they were trained on."""


def train_value_sft(cfg: ValueSFTConfig) -> ValueSFTResult:
    """Run the joint stage and save the policy to ``output_dir`` and the critic to ``critic/``."""
    from ddai.trainer.common import hf_progress
    from ddai.trainer.runtime import accel
    from ddai.trainer.value.rows import (
        resolve_split,
        split_data,
        tokenize_rows,
        training_rows,
        write_split,
    )
    from ddai.trainer.value.train import evaluate

    cfg.check()
    hf_progress(cfg.progress)
    rows, incomplete = training_rows(cfg)
    acc = accel.make_accelerator(gradient_accumulation_steps=cfg.grad_accum)
    main = acc.is_main_process
    torch.manual_seed(cfg.seed)
    model, tok = load_joint(cfg)
    pad_id = tok.pad_token_id
    tokenized = tokenize_rows(rows, tok, cfg)
    if not tokenized.rollouts:
        raise ValueError(
            f"no rollout left to learn from (dropped: {tokenized.dropped}); raise --max-length"
        )
    split = resolve_split(tokenized.rollouts, cfg, critic=cfg.critic)
    data = split_data(tokenized.rollouts, cfg, split, tokenized.dropped)
    if not any(r.success for r in data.train):
        raise ValueError(
            "no correct rollout among the training prompts, so the weighted CE has nothing to "
            "learn; add runs or lower --success-threshold"
        )
    out = Path(cfg.output_dir)
    bare: JointModel
    bare, eval_before, history, eval_after = fit_with_held_out(
        model=model,
        acc=acc,
        data=data,
        cfg=cfg,
        out=out,
        step_loss=step_loss,
        pad_id=pad_id,
        grad_clip=cfg.max_grad_norm,
        evaluate=evaluate,
        label="value-sft",
        command="train value-sft",
    )
    acc.wait_for_everyone()
    critic_dir = out / CRITIC_DIR
    if main:
        _save(bare, tok, out, critic_dir)
        for folder in (out, critic_dir):  # the next stage from this critic holds out the same
            write_split(folder, split)
    acc.wait_for_everyone()

    def at(i: int, key: str) -> float | None:
        return history[i].get(key) if history else None

    return ValueSFTResult(
        output_dir=str(out),
        critic_dir=str(critic_dir),
        head=bare.head_type,
        rollouts=len(tokenized.rollouts),
        train_prompts=len({r.uid for r in data.train}),
        val_prompts=len({r.uid for r in data.val}),
        train_pairs=len(data.train_pairs),
        split_seed=split.seed,
        split_source=split.source,
        held_out_digest=split.digest,
        steps=cfg.max_steps,
        weighted_ce_first=at(0, "joint/weighted_ce"),
        weighted_ce_last=at(-1, "joint/weighted_ce"),
        value_loss_first=at(0, "value/loss"),
        value_loss_last=at(-1, "value/loss"),
        weight_mean_last=at(-1, "joint/weight_mean"),
        eval_before=eval_before,
        eval_after=eval_after,
        turns_incomplete=incomplete,
        include_incomplete=cfg.include_incomplete,
    )


def _save(model: JointModel, tok: Any, out: Path, critic_dir: Path) -> None:
    """The policy as a causal LM folder, then the critic as a value checkpoint whose trunk is it."""
    model.lm.save_pretrained(out)  # safetensors files, each written whole by transformers
    tok.save_pretrained(out)
    critic = ValueModel(
        model.lm.base_model, model.head, head_type=model.head_type, unfreeze=0,
        dropout=model.dropout,
    )  # fmt: skip
    save_value_model(critic, tok, critic_dir, source=str(out))
