"""CLI: ``ddai train value``, ``ddai train value-sft`` (added to the ``train`` group) and
``ddai value score``."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RunsOpt,
    ThresholdOpt,
    check_run_ids,
    summary,
)
from ddai.cli.fields import field_opt, flags_config
from ddai.cli.flags import with_groups
from ddai.cli.options import default_of, device_options, parse_floats
from ddai.cli.running import TRAIN_HELP, maybe_relaunch, run_or_fail, sub_app
from ddai.cli.value_opts import (
    BinEdgesOpt,
    BinWeightsOpt,
    DtypeOpt,
    MaxLenOpt,
    ObsOpt,
    PromptsOpt,
    SystemOpt,
    value_fit_flags,
    value_run_flags,
    value_summary,
)
from ddai.trainer.value.config import ValueScoreConfig, ValueTrainConfig

T = ValueTrainConfig
S = ValueScoreConfig


@with_groups({"run": value_run_flags(T), "fit": value_fit_flags(T), "device": device_options})
def train_value_command(
    *,
    run: dict[str, Any],
    logs: LogsOpt = default_of(T, "logs"),
    runs: RunsOpt = default_of(T, "runs"),
    data: PromptsOpt = default_of(T, "data"),
    system_prompt: SystemOpt = default_of(T, "system_prompt"),
    head: Annotated[str | None, field_opt(T, "head")] = default_of(T, "head"),
    unfreeze: Annotated[int, field_opt(T, "unfreeze")] = default_of(T, "unfreeze"),
    dropout: Annotated[float, field_opt(T, "dropout")] = default_of(T, "dropout"),
    fit: dict[str, Any],
    success_threshold: ThresholdOpt = default_of(T, "success_threshold"),
    bin_edges: BinEdgesOpt = None,
    bin_weights: BinWeightsOpt = None,
    grad_clip: Annotated[float, field_opt(T, "grad_clip")] = default_of(T, "grad_clip"),
    device: dict[str, Any],
    progress: ProgressOpt = default_of(T, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Train a value head on terminal outcomes from the rollout log: pairwise ranking + MC MSE."""
    maybe_relaunch(**device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.train import train_value

    cfg = flags_config(
        ValueTrainConfig,
        locals(),
        **run,
        **fit,
        bin_edges=parse_floats(bin_edges, "--bin-edges"),
        bin_weights=parse_floats(bin_weights, "--bin-weights"),
        progress=progress and not as_json,
    )
    value_summary("ddai train value", train_value, cfg, as_json=as_json)


def value_score_command(
    checkpoint: Annotated[Path, field_opt(S, "checkpoint")],
    logs: LogsOpt = default_of(S, "logs"),
    runs: RunsOpt = default_of(S, "runs"),
    out_run: Annotated[str | None, field_opt(S, "out_run", callback=check_run_ids)] = default_of(
        S, "out_run"
    ),
    data: PromptsOpt = default_of(S, "data"),
    system_prompt: SystemOpt = default_of(S, "system_prompt"),
    success_threshold: ThresholdOpt = default_of(S, "success_threshold"),
    batch_size: Annotated[int, field_opt(S, "batch_size")] = default_of(S, "batch_size"),
    max_length: MaxLenOpt = default_of(S, "max_length"),
    obs_max_tokens: ObsOpt = default_of(S, "obs_max_tokens"),
    dtype: DtypeOpt = default_of(S, "dtype"),
    progress: ProgressOpt = default_of(S, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Write per-turn value estimates into the rollout log (turns[].value)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.score import score_runs

    cfg = flags_config(ValueScoreConfig, locals(), progress=progress and not as_json)
    summary("ddai value score", asdict(run_or_fail(score_runs, cfg)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train value`` and ``train value-sft`` to the ``train`` group, and the ``value``
    group."""
    from ddai.cli.value_sft import train_value_sft_command

    train_app = sub_app(app, "train", TRAIN_HELP)
    train_app.command(
        "value", short_help="Train a value head on terminal outcomes from the rollout log."
    )(train_value_command)
    train_app.command(
        "value-sft", short_help="Seed 004's joint stage: SFT weighted by the critic's TD error."
    )(train_value_sft_command)
    value_app = typer.Typer(
        help="Value heads over the rollout log: per-turn value estimates.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    value_app.command("score", short_help="Write per-turn value estimates into the rollout log.")(
        value_score_command
    )
    app.add_typer(value_app, name="value")
