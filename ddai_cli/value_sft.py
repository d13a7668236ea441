"""CLI: ``ddai train value-sft``, seed 004's joint stage (TD-weighted SFT with the critic)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, RunsOpt, ThresholdOpt, summary
from ddai.cli.options import (
    AccelerateConfigOpt,
    DtypeOpt,
    LaunchOpt,
    MaxLenOpt,
    ObsOpt,
    PromptsOpt,
    SystemOpt,
    ValueOutOpt,
    parse_floats,
)
from ddai.cli.running import maybe_relaunch, run_or_fail, with_evals


def _opt(flag: str, text: str):
    return typer.Option(flag, help=text)


def train_value_sft_command(
    model: Annotated[str, _opt("--model", "The policy: a causal LM folder or hub id.")],
    critic: Annotated[
        str,
        _opt(
            "--critic",
            "A value checkpoint from `ddai train value` on this policy's trunk; its head type "
            "(linear/mlp) is read from it, and a trunk it trained replaces the policy's.",
        ),
    ],
    out: ValueOutOpt,
    logs: LogsOpt = None,
    run: RunsOpt = None,
    data: PromptsOpt = None,
    system_prompt: SystemOpt = None,
    trunk_lr: Annotated[float, _opt("--trunk-lr", "Learning rate of the policy/trunk.")] = 1e-5,
    head_lr: Annotated[float, _opt("--head-lr", "Learning rate of the value head.")] = 1e-4,
    weight_decay: Annotated[float, _opt("--weight-decay", "AdamW weight decay.")] = 0.0,
    max_grad_norm: Annotated[
        float, _opt("--max-grad-norm", "Gradient clipping norm (0: off).")
    ] = 0.5,
    value_loss_coef: Annotated[
        float, _opt("--value-loss-coef", "Scale of the value loss added to the weighted CE.")
    ] = 0.05,
    pairwise_coef: Annotated[
        float, _opt("--pairwise-coef", "Pairwise ranking term of the value loss (0: MC alone).")
    ] = 1.0,
    mc_coef: Annotated[float, _opt("--mc-coef", "MC tokenwise MSE term of the value loss.")] = 0.5,
    beta: Annotated[float, _opt("--beta", "Temperature β of w = exp(δ/β).")] = 1.0,
    weight_clip_min: Annotated[
        float, _opt("--weight-clip-min", "Lower clip of the token weights.")
    ] = 0.1,
    weight_clip_max: Annotated[
        float, _opt("--weight-clip-max", "Upper clip of the token weights.")
    ] = 2.0,
    gamma: Annotated[float, _opt("--gamma", "Discount γ of the TD error.")] = 1.0,
    lam: Annotated[float, _opt("--lam", "GAE λ of the TD error (1: Monte-Carlo, R − V).")] = 1.0,
    value_trunk_grad: Annotated[
        bool,
        typer.Option(
            "--value-trunk-grad/--value-head-only",
            help="Let the value loss train the trunk, or only the head (detached hidden states).",
        ),
    ] = True,
    target: Annotated[
        str, _opt("--target", "Outcome R: success (1/0) or the logged reward.")
    ] = "success",
    success_threshold: ThresholdOpt = 1.0,
    max_pairs: Annotated[
        int, _opt("--max-pairs-per-problem", "Most success/failure pairs drawn per prompt.")
    ] = 25,
    bin_edges: Annotated[
        str | None,
        _opt("--bin-edges", "Success-rate bin edges for difficulty weighting, e.g. 0.01,0.5."),
    ] = None,
    bin_weights: Annotated[
        str | None, _opt("--bin-weights", "Share of pairs per bin, e.g. 0.4,0.3,0.3.")
    ] = None,
    val_fraction: Annotated[
        float, _opt("--val-fraction", "Share of prompts held out for the critic's evaluation.")
    ] = 0.2,
    batch_size: Annotated[
        int, _opt("--batch-size", "Pairs per step (rollouts with --pairwise-coef 0).")
    ] = 8,
    max_steps: Annotated[int, _opt("--max-steps", "Optimizer steps.")] = 200,
    eval_steps: Annotated[
        int, _opt("--eval-steps", "Evaluate held-out prompts every N steps.")
    ] = 50,
    max_length: MaxLenOpt = 2048,
    obs_max_tokens: ObsOpt = 256,
    grad_accum: Annotated[int, _opt("--grad-accum", "Micro-batches per optimizer step.")] = 1,
    dtype: DtypeOpt = "float32",
    seed: Annotated[int, _opt("--seed", "Random seed (pair draws, split).")] = 42,
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Seed 004's joint stage: SFT on correct rollouts, each token weighted by
    clip(exp(δ/β)) from the critic's TD error, trained with the critic's value loss."""
    maybe_relaunch(launch, accelerate_config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.sft import ValueSFTConfig, train_value_sft

    cfg = ValueSFTConfig(
        model=model,
        critic=critic,
        output_dir=out,
        logs=logs,
        runs=run,
        data=data,
        system_prompt=system_prompt,
        trunk_lr=trunk_lr,
        head_lr=head_lr,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
        value_loss_coef=value_loss_coef,
        pairwise_coef=pairwise_coef,
        mc_coef=mc_coef,
        beta=beta,
        weight_clip_min=weight_clip_min,
        weight_clip_max=weight_clip_max,
        gamma=gamma,
        lam=lam,
        value_trunk_grad=value_trunk_grad,
        target=target,
        success_threshold=success_threshold,
        max_pairs_per_problem=max_pairs,
        bin_edges=parse_floats(bin_edges, "--bin-edges"),
        bin_weights=parse_floats(bin_weights, "--bin-weights"),
        val_fraction=val_fraction,
        batch_size=batch_size,
        max_steps=max_steps,
        eval_steps=eval_steps,
        max_length=max_length,
        obs_max_tokens=obs_max_tokens,
        grad_accum=grad_accum,
        dtype=dtype,
        seed=seed,
        progress=progress and not as_json,
    )
    flat = with_evals(asdict(run_or_fail(train_value_sft, cfg)))
    summary("ddai train value-sft", flat, as_json=as_json)
