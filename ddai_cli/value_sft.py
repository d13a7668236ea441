"""CLI: ``ddai train value-sft``, seed 004's joint stage (TD-weighted SFT with the critic)."""

from __future__ import annotations

import os
from typing import Annotated, Any

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, RunsOpt, ThresholdOpt
from ddai.cli.fields import field_opt, flags_config
from ddai.cli.flags import with_groups
from ddai.cli.options import default_of, device_options, parse_floats
from ddai.cli.running import maybe_relaunch
from ddai.cli.value_opts import (
    BinEdgesOpt,
    BinWeightsOpt,
    PromptsOpt,
    SystemOpt,
    value_fit_flags,
    value_run_flags,
    value_summary,
)
from ddai.trainer.value.config import ValueSFTConfig

C = ValueSFTConfig


@with_groups({"run": value_run_flags(C), "fit": value_fit_flags(C), "device": device_options})
def train_value_sft_command(
    *,
    run: dict[str, Any],
    critic: Annotated[str, field_opt(C, "critic")],
    logs: LogsOpt = default_of(C, "logs"),
    runs: RunsOpt = default_of(C, "runs"),
    data: PromptsOpt = default_of(C, "data"),
    system_prompt: SystemOpt = default_of(C, "system_prompt"),
    fit: dict[str, Any],
    max_grad_norm: Annotated[float, field_opt(C, "max_grad_norm")] = default_of(C, "max_grad_norm"),
    value_loss_coef: Annotated[float, field_opt(C, "value_loss_coef")] = default_of(
        C, "value_loss_coef"
    ),
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
    success_threshold: ThresholdOpt = default_of(C, "success_threshold"),
    bin_edges: BinEdgesOpt = None,
    bin_weights: BinWeightsOpt = None,
    device: dict[str, Any],
    progress: ProgressOpt = default_of(C, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Seed 004's joint stage: SFT on correct rollouts, each token weighted by
    clip(exp(δ/β)) from the critic's TD error, trained with the critic's value loss."""
    maybe_relaunch(**device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.sft import train_value_sft

    cfg = flags_config(
        ValueSFTConfig,
        locals(),
        **run,
        **fit,
        bin_edges=parse_floats(bin_edges, "--bin-edges"),
        bin_weights=parse_floats(bin_weights, "--bin-weights"),
        progress=progress and not as_json,
    )
    value_summary("ddai train value-sft", train_value_sft, cfg, as_json=as_json)
