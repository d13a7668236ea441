"""CLI: ``ddai train ppo`` (added to the ``train`` group): PPO over the multi-turn search
environment with a value head as critic (``ddai.trainer.ppo``); flags from ``PPORunConfig``."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import typer

from ddai.cli.app import SUBCOMMANDS
from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import (
    INPUTS,
    LORA,
    POLICY,
    PREFLIGHT,
    default_of,
    episode_settings,
    require_inputs,
)
from ddai.cli.running import (
    AppendRunOpt,
    device_options,
    main_summary,
    maybe_relaunch,
    refuse_existing_run,
    run_or_fail,
    sub_app,
)
from ddai.trainer.ppo.config import PPORunConfig

PPO_FLAGS = config_flags(
    PPORunConfig,
    {
        **POLICY,
        **INPUTS,
        **dict.fromkeys(("critic", "critic_head", "critic_unfreeze")),
        **dict.fromkeys(("n_agent", "batch_size", "mini_batch_size", "ppo_epochs", "max_steps")),
        "learning_rate": "--lr",
        **dict.fromkeys(("critic_lr", "critic_trunk_lr", "clip_low", "clip_high", "vf_clip")),
        "kl_coef": "--kl",
        **dict.fromkeys(("kl_estimator", "kl_mode", "reward_norm", "entropy_coef", "gamma")),
        "lam": None,
        "whiten_advantages": "--whiten/--no-whiten",
        **dict.fromkeys(("temperature", "grad_accum", "grad_clip", "experience_micro_batch")),
        **dict.fromkeys(("resume", "save_steps")),
        **dict.fromkeys(("observation", "image_root", "generator_max_images")),
        **PREFLIGHT,
        **LORA,
    },
)
"""Every flag of ``train ppo`` that fills a ``PPORunConfig`` field (the nested episode settings
are ``options.episode_settings``)."""


@with_groups({"cfg": PPO_FLAGS, "nested": episode_settings, "device": device_options})
def train_ppo_command(
    *,
    cfg: dict[str, Any],
    nested: dict[str, Any],
    logs: LogsOpt = default_of(PPORunConfig, "logs"),
    append: AppendRunOpt = False,
    device: dict[str, Any],
    progress: ProgressOpt = default_of(PPORunConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """PPO over the multi-turn search environment, with a value head as critic and GAE."""
    refuse_existing_run("ddai train ppo", logs, cfg["run_id"], append=append, resume=cfg["resume"])
    maybe_relaunch(**device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.ppo.train import run_ppo

    config = PPORunConfig(**cfg, **nested, logs=logs, progress=progress and not as_json)
    require_inputs(config.data, config.corpus)
    main_summary("ddai train ppo", asdict(run_or_fail(run_ppo, config)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train ppo`` to the ``train`` group."""
    sub_app(app, "train").command("ppo", short_help=SUBCOMMANDS["train"]["ppo"].help)(
        train_ppo_command
    )
