"""CLI: ``ddai train value``, ``ddai train value-sft`` (seed 004's joint stage: TD-weighted SFT
with the critic; both added to the ``train`` group) and ``ddai value score``: flags from ``ValueTrainConfig``, ``ValueSFTConfig`` and ``ValueScoreConfig``
(``ddai.trainer.value.config``), whose shared bases give the fields they share one definition."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import typer

from ddai.cli.app import SUBCOMMANDS
from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, RunsOpt, ThresholdOpt, check_run_ids
from ddai.cli.common import summary as print_summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import POLICY, default_of
from ddai.cli.running import device_options, maybe_relaunch, parse_floats, run_or_fail, sub_app
from ddai.trainer.value.config import (
    ValueRowsConfig,
    ValueScoreConfig,
    ValueSFTConfig,
    ValueTrainConfig,
)

ROWS = dict.fromkeys(("data", "system_prompt", "max_length", "obs_max_tokens", "dtype"))
"""The flags of the fields every value command reads rollouts with (``ValueRowsConfig``)."""
BINS = {name: {"type": str | None, "default": None} for name in ("bin_edges", "bin_weights")}
"""``--bin-edges``/``--bin-weights`` as comma-separated text (``bins`` parses them)."""
FIT = {
    **POLICY,
    **ROWS,
    **dict.fromkeys(("trunk_lr", "head_lr", "weight_decay", "pairwise_coef", "mc_coef", "target")),
    **dict.fromkeys(("max_pairs_per_problem", "val_fraction", "split_seed", "batch_size")),
    **dict.fromkeys(("max_steps", "eval_steps", "grad_accum", "include_incomplete")),
    **BINS,
}  # fmt: skip
"""The flags both value trainings have (``ValueFitConfig`` and the run fields)."""


def bins(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with ``--bin-edges``/``--bin-weights`` parsed into numbers (bad text exits 2)."""
    return cfg | {k: parse_floats(cfg[k], f"--{k.replace('_', '-')}") for k in BINS}


def rows_read(
    *,
    logs: LogsOpt = default_of(ValueRowsConfig, "logs"),
    runs: RunsOpt = default_of(ValueRowsConfig, "runs"),
    success_threshold: ThresholdOpt = default_of(ValueRowsConfig, "success_threshold"),
) -> dict[str, Any]:
    """``--logs``, ``--run``, ``--success-threshold``: which rollouts every value command reads
    (``ValueRowsConfig``), as a group (``with_groups``)."""
    return {"logs": logs, "runs": runs, "success_threshold": success_threshold}


def value_training(config_class: type, flags: Callable[..., Any], title: str) -> Callable[..., Any]:
    """Make ``trainer()`` (its docstring the help; it imports and gives the training function) a
    value-head training command: after ``--launch``, the ``config_class`` built from ``flags``
    (the bins parsed) and the rows read is trained (bad input exits 2) and the summary printed
    flat, the ``eval_before``/``eval_after`` maps spread into ``before KEY``/``after KEY``."""

    def decorate(trainer: Callable[[], Callable[[Any], Any]]) -> Callable[..., None]:
        def command(
            *,
            cfg: dict[str, Any],
            rows: dict[str, Any],
            device: dict[str, Any],
            progress: ProgressOpt = default_of(config_class, "progress"),
            as_json: JsonOpt = False,
        ) -> None:
            maybe_relaunch(**device)
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            config = config_class(**bins(cfg), **rows, progress=progress and not as_json)
            result = asdict(run_or_fail(trainer(), config))
            flat = {k: v for k, v in result.items() if k not in ("eval_before", "eval_after")}
            flat |= {f"before {k}": v for k, v in result["eval_before"].items()}
            flat |= {f"after {k}": v for k, v in result["eval_after"].items()}
            print_summary(title, flat, as_json=as_json)

        command.__doc__ = trainer.__doc__
        return with_groups({"cfg": flags, "rows": rows_read, "device": device_options})(command)

    return decorate


TRAIN_FLAGS = config_flags(
    ValueTrainConfig, FIT | dict.fromkeys(("head", "unfreeze", "dropout", "grad_clip"))
)


@value_training(ValueTrainConfig, TRAIN_FLAGS, "ddai train value")
def train_value_command() -> Callable[[Any], Any]:
    """Train a value head on terminal outcomes from the rollout log: pairwise ranking + MC MSE."""
    from ddai.trainer.value.train import train_value

    return train_value


SCORE_FLAGS = config_flags(
    ValueScoreConfig,
    {"checkpoint": None, "out_run": {"callback": check_run_ids}, "batch_size": None, **ROWS},
)


@with_groups({"cfg": SCORE_FLAGS, "rows": rows_read})
def value_score_command(
    *,
    cfg: dict[str, Any],
    rows: dict[str, Any],
    progress: ProgressOpt = default_of(ValueScoreConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Write per-turn value estimates into the rollout log (turns[].value)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.score import score_runs

    config = ValueScoreConfig(**cfg, **rows, progress=progress and not as_json)
    print_summary("ddai value score", asdict(run_or_fail(score_runs, config)), as_json=as_json)


SFT_FLAGS = config_flags(
    ValueSFTConfig,
    {
        **FIT,
        "critic": None,
        **dict.fromkeys(("max_grad_norm", "value_loss_coef", "beta", "gamma", "lam")),
        **dict.fromkeys(("weight_clip_min", "weight_clip_max")),
        "value_trunk_grad": "--value-trunk-grad/--value-head-only",
    },
)


@value_training(ValueSFTConfig, SFT_FLAGS, "ddai train value-sft")
def train_value_sft_command() -> Callable[[Any], Any]:
    """Seed 004's joint stage: SFT on correct rollouts, each token weighted by
    clip(exp(δ/β)) from the critic's TD error, trained with the critic's value loss."""
    from ddai.trainer.value.sft import train_value_sft

    return train_value_sft


def register(app: typer.Typer) -> None:
    """Add ``train value`` and ``train value-sft`` to the ``train`` group, and the ``value``
    group."""
    train_app = sub_app(app, "train")
    train_app.command("value", short_help=SUBCOMMANDS["train"]["value"].help)(train_value_command)
    train_app.command("value-sft", short_help=SUBCOMMANDS["train"]["value-sft"].help)(
        train_value_sft_command
    )
    sub_app(app, "value").command(
        "score", short_help="Write per-turn value estimates into the rollout log."
    )(value_score_command)
