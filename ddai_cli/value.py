"""CLI: ``ddai train value``, ``ddai train value-sft`` (added to the ``train`` group) and
``ddai value score``."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RunsOpt,
    ThresholdOpt,
    check_run_ids,
    fail,
    summary,
)
from ddai.cli.options import (
    AccelerateConfigOpt,
    DtypeOpt,
    LaunchOpt,
    MaxLenOpt,
    ObsOpt,
    PromptsOpt,
    SystemOpt,
    ValueOutOpt,
    ValueSeedOpt,
    parse_floats,
)
from ddai.cli.running import TRAIN_HELP, maybe_relaunch, run_or_fail, sub_app, with_evals


def train_value_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Causal LM folder or hub id (a fresh head on its trunk), or a value checkpoint to continue.",
        ),
    ],
    out: ValueOutOpt,
    logs: LogsOpt = None,
    run: RunsOpt = None,
    data: PromptsOpt = None,
    system_prompt: SystemOpt = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head",
            help="Value head: linear (hidden → 1) or mlp (hidden → 512 → 256 → 1, dropout). Default: linear, or the checkpoint's.",
        ),
    ] = None,
    unfreeze: Annotated[
        int,
        typer.Option(
            "--unfreeze",
            help="Top trunk layers that train; 0: the head alone, on detached hidden states.",
        ),
    ] = 2,
    dropout: Annotated[float, typer.Option("--dropout", help="Dropout of the mlp head.")] = 0.1,
    trunk_lr: Annotated[
        float, typer.Option("--trunk-lr", help="Learning rate of the unfrozen trunk layers.")
    ] = 1e-5,
    head_lr: Annotated[float, typer.Option("--head-lr", help="Learning rate of the head.")] = 1e-4,
    weight_decay: Annotated[
        float, typer.Option("--weight-decay", help="AdamW weight decay.")
    ] = 0.0,
    pairwise_coef: Annotated[
        float,
        typer.Option(
            "--pairwise-coef", help="Weight of the pairwise ranking loss (0: MC targets alone)."
        ),
    ] = 1.0,
    mc_coef: Annotated[
        float, typer.Option("--mc-coef", help="Weight of the Monte-Carlo tokenwise MSE.")
    ] = 0.5,
    target: Annotated[
        str, typer.Option("--target", help="MC target: success (1/0) or the logged reward.")
    ] = "success",
    success_threshold: ThresholdOpt = 1.0,
    max_pairs: Annotated[
        int,
        typer.Option(
            "--max-pairs-per-problem", help="Most success/failure pairs drawn per prompt."
        ),
    ] = 25,
    bin_edges: Annotated[
        str | None,
        typer.Option(
            "--bin-edges",
            help="Success-rate bin edges for difficulty weighting, e.g. 0.25,0.75 (default: uniform pairs).",
        ),
    ] = None,
    bin_weights: Annotated[
        str | None,
        typer.Option(
            "--bin-weights", help="Share of sampled pairs per bin, one per bin, e.g. 0.4,0.3,0.3."
        ),
    ] = None,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", help="Share of prompts held out for evaluation.")
    ] = 0.2,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Pairs per step (rollouts with --pairwise-coef 0).")
    ] = 8,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Optimizer steps.")] = 200,
    eval_steps: Annotated[
        int, typer.Option("--eval-steps", help="Evaluate the held-out prompts every N steps.")
    ] = 50,
    max_length: MaxLenOpt = 2048,
    obs_max_tokens: ObsOpt = 256,
    grad_accum: Annotated[
        int,
        typer.Option(
            "--grad-accum",
            help="Micro-batches of --batch-size pairs accumulated per optimizer step.",
        ),
    ] = 1,
    grad_clip: Annotated[
        float, typer.Option("--grad-clip", help="Max gradient norm (0: off).")
    ] = 1.0,
    dtype: DtypeOpt = "float32",
    seed: ValueSeedOpt = 0,
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Train a value head on terminal outcomes from the rollout log: pairwise ranking + MC MSE."""
    maybe_relaunch(launch, accelerate_config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.train import ValueTrainConfig, train_value

    cfg = ValueTrainConfig(
        model=model,
        output_dir=out,
        logs=logs,
        runs=run,
        data=data,
        system_prompt=system_prompt,
        head=head,
        unfreeze=unfreeze,
        dropout=dropout,
        trunk_lr=trunk_lr,
        head_lr=head_lr,
        weight_decay=weight_decay,
        pairwise_coef=pairwise_coef,
        mc_coef=mc_coef,
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
        grad_clip=grad_clip,
        grad_accum=grad_accum,
        dtype=dtype,
        seed=seed,
        progress=progress and not as_json,
    )
    flat = with_evals(asdict(run_or_fail(train_value, cfg)))
    summary("ddai train value", flat, as_json=as_json)


def value_score_command(
    checkpoint: Annotated[
        Path,
        typer.Option(
            "--checkpoint", help="A value checkpoint (the --out-dir of ddai train value)."
        ),
    ],
    logs: LogsOpt = None,
    run: RunsOpt = None,
    out_run: Annotated[
        str | None,
        typer.Option(
            "--out-run",
            callback=check_run_ids,
            help="Write the scored rollouts as this new run (one --run only). Default: a new version of each run's partition.",
        ),
    ] = None,
    data: PromptsOpt = None,
    system_prompt: SystemOpt = None,
    success_threshold: ThresholdOpt = 1.0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Rollouts per forward pass.")
    ] = 16,
    max_length: MaxLenOpt = 2048,
    obs_max_tokens: ObsOpt = 256,
    dtype: DtypeOpt = "float32",
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Write per-turn value estimates into the rollout log (turns[].value)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.score import ValueScoreConfig, score_runs

    if not checkpoint.is_dir():
        raise fail(
            f"--checkpoint {checkpoint} not found; train one with `ddai train value --out-dir DIR`"
        )
    cfg = ValueScoreConfig(
        checkpoint=checkpoint,
        logs=logs,
        runs=run,
        out_run=out_run,
        data=data,
        system_prompt=system_prompt,
        success_threshold=success_threshold,
        batch_size=batch_size,
        max_length=max_length,
        obs_max_tokens=obs_max_tokens,
        dtype=dtype,
        progress=progress and not as_json,
    )
    summary("ddai value score", asdict(run_or_fail(score_runs, cfg)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train value`` and ``train value-sft`` to the ``train`` group, and the ``value``
    group."""
    from ddai.cli.value_sft import train_value_sft_command

    train_app = sub_app(app, "train", TRAIN_HELP)
    train_app.command("value")(train_value_command)
    train_app.command("value-sft")(train_value_sft_command)
    value_app = typer.Typer(
        help="Value heads over the rollout log: per-turn value estimates.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    value_app.command("score")(value_score_command)
    app.add_typer(value_app, name="value")
