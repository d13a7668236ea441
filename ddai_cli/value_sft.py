"""CLI: ``ddai train value-sft``, seed 004's joint stage (TD-weighted SFT with the critic)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, RunsOpt, ThresholdOpt
from ddai.cli.fields import field_opt, flags_config
from ddai.cli.options import AccelerateConfigOpt, LaunchOpt, default_of, parse_floats
from ddai.cli.running import maybe_relaunch
from ddai.cli.value_opts import (
    BinEdgesOpt,
    BinWeightsOpt,
    DtypeOpt,
    MaxLenOpt,
    ObsOpt,
    PromptsOpt,
    SystemOpt,
    value_summary,
)
from ddai.trainer.value.config import ValueSFTConfig

C = ValueSFTConfig


def train_value_sft_command(
    model: Annotated[str, field_opt(C, "model")],
    critic: Annotated[str, field_opt(C, "critic")],
    output_dir: Annotated[Path, field_opt(C, "output_dir", "--out-dir")],
    logs: LogsOpt = default_of(C, "logs"),
    runs: RunsOpt = default_of(C, "runs"),
    data: PromptsOpt = default_of(C, "data"),
    system_prompt: SystemOpt = default_of(C, "system_prompt"),
    trunk_lr: Annotated[float, field_opt(C, "trunk_lr")] = default_of(C, "trunk_lr"),
    head_lr: Annotated[float, field_opt(C, "head_lr")] = default_of(C, "head_lr"),
    weight_decay: Annotated[float, field_opt(C, "weight_decay")] = default_of(C, "weight_decay"),
    max_grad_norm: Annotated[float, field_opt(C, "max_grad_norm")] = default_of(C, "max_grad_norm"),
    value_loss_coef: Annotated[float, field_opt(C, "value_loss_coef")] = default_of(
        C, "value_loss_coef"
    ),
    pairwise_coef: Annotated[float, field_opt(C, "pairwise_coef")] = default_of(C, "pairwise_coef"),
    mc_coef: Annotated[float, field_opt(C, "mc_coef")] = default_of(C, "mc_coef"),
    beta: Annotated[float, field_opt(C, "beta")] = default_of(C, "beta"),
    weight_clip_min: Annotated[float, field_opt(C, "weight_clip_min")] = default_of(
        C, "weight_clip_min"
    ),
    weight_clip_max: Annotated[float, field_opt(C, "weight_clip_max")] = default_of(
        C, "weight_clip_max"
    ),
    gamma: Annotated[float, field_opt(C, "gamma")] = default_of(C, "gamma"),
    lam: Annotated[float, field_opt(C, "lam")] = default_of(C, "lam"),
    value_trunk_grad: Annotated[
        bool, field_opt(C, "value_trunk_grad", "--value-trunk-grad/--value-head-only")
    ] = default_of(C, "value_trunk_grad"),
    target: Annotated[str, field_opt(C, "target")] = default_of(C, "target"),
    success_threshold: ThresholdOpt = default_of(C, "success_threshold"),
    max_pairs_per_problem: Annotated[int, field_opt(C, "max_pairs_per_problem")] = default_of(
        C, "max_pairs_per_problem"
    ),
    bin_edges: BinEdgesOpt = None,
    bin_weights: BinWeightsOpt = None,
    val_fraction: Annotated[float, field_opt(C, "val_fraction")] = default_of(C, "val_fraction"),
    batch_size: Annotated[int, field_opt(C, "batch_size")] = default_of(C, "batch_size"),
    max_steps: Annotated[int, field_opt(C, "max_steps")] = default_of(C, "max_steps"),
    eval_steps: Annotated[int, field_opt(C, "eval_steps")] = default_of(C, "eval_steps"),
    max_length: MaxLenOpt = default_of(C, "max_length"),
    obs_max_tokens: ObsOpt = default_of(C, "obs_max_tokens"),
    grad_accum: Annotated[int, field_opt(C, "grad_accum")] = default_of(C, "grad_accum"),
    dtype: DtypeOpt = default_of(C, "dtype"),
    seed: Annotated[int, field_opt(C, "seed")] = default_of(C, "seed"),
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    progress: ProgressOpt = default_of(C, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Seed 004's joint stage: SFT on correct rollouts, each token weighted by
    clip(exp(δ/β)) from the critic's TD error, trained with the critic's value loss."""
    maybe_relaunch(launch, accelerate_config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.sft import train_value_sft

    cfg = flags_config(
        ValueSFTConfig,
        locals(),
        bin_edges=parse_floats(bin_edges, "--bin-edges"),
        bin_weights=parse_floats(bin_weights, "--bin-weights"),
        progress=progress and not as_json,
    )
    value_summary("ddai train value-sft", train_value_sft, cfg, as_json=as_json)
