"""CLI: ``ddai train ppo`` (added to the ``train`` group): PPO over the multi-turn search
environment with a value head as critic (``ddai.trainer.ppo``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import (
    CorpusOpt,
    PromptDataOpt,
    default_of,
    device_options,
    episode_settings,
    lora_flags,
    preflight_flags,
    require_inputs,
    run_flags,
    run_id_option,
)
from ddai.cli.running import (
    TRAIN_HELP,
    AppendRunOpt,
    main_summary,
    maybe_relaunch,
    refuse_existing_run,
    run_or_fail,
    sub_app,
)
from ddai.trainer.ppo.config import PPORunConfig

PPO_RUN_ID = run_id_option("ppo")

PPO_FLAGS = config_flags(
    PPORunConfig,
    {
        "n_agent": None,
        "batch_size": None,
        "mini_batch_size": None,
        "ppo_epochs": None,
        "max_steps": None,
        "learning_rate": "--lr",
        "critic_lr": None,
        "critic_trunk_lr": None,
        "clip_low": None,
        "clip_high": None,
        "vf_clip": None,
        "kl_coef": "--kl",
        "kl_estimator": None,
        "kl_mode": None,
        "reward_norm": None,
        "entropy_coef": None,
        "gamma": None,
        "lam": None,
        "whiten_advantages": "--whiten/--no-whiten",
        "temperature": None,
        "limit": None,
        "grad_accum": None,
        "grad_clip": None,
        "experience_micro_batch": None,
        "resume": None,
        "save_steps": None,
        "observation": None,
        "image_root": None,
        "generator_max_images": None,
    },
)
"""The PPO flags whose type, default and help are ``PPORunConfig``'s own."""


PPO_RUN = run_flags(
    PPORunConfig,
    model="Starting policy: a local folder or a hub id.",
    out="Output folder: the policy, critic/ and metrics.jsonl.",
    seed="Random seed (sampling, split, head init).",
)
"""``--model``, ``--out-dir``, ``--dtype`` and ``--seed``, with PPO's own help for three."""


@with_groups(
    {
        "run": PPO_RUN,
        "device": device_options,
        "preflight": preflight_flags(PPORunConfig),
        "nested": episode_settings,
        "settings": PPO_FLAGS,
        "adapter": lora_flags(PPORunConfig),
    }
)
def train_ppo_command(
    *,
    run: dict[str, Any],
    data: PromptDataOpt,
    corpus: CorpusOpt,
    critic: Annotated[
        str | None,
        typer.Option(
            "--critic",
            help="Value checkpoint to start the critic from (ddai train value). Default: a fresh head on the policy's trunk.",
        ),
    ] = default_of(PPORunConfig, "critic"),
    critic_head: Annotated[
        str, typer.Option("--critic-head", help="Head of a fresh critic: linear or mlp.")
    ] = default_of(PPORunConfig, "critic_head"),
    critic_unfreeze: Annotated[
        int | None,
        typer.Option(
            "--critic-unfreeze",
            help="Top critic trunk layers that train. Default: the checkpoint's, or 2.",
        ),
    ] = default_of(PPORunConfig, "critic_unfreeze"),
    logs: LogsOpt = default_of(PPORunConfig, "logs"),
    run_id: PPO_RUN_ID = default_of(PPORunConfig, "run_id"),
    append: AppendRunOpt = False,
    preflight: dict[str, Any],
    device: dict[str, Any],
    progress: ProgressOpt = default_of(PPORunConfig, "progress"),
    as_json: JsonOpt = False,
    settings: dict[str, Any],
    adapter: dict[str, Any],
    nested: dict[str, Any],
) -> None:
    """PPO over the multi-turn search environment, with a value head as critic and GAE."""
    refuse_existing_run(
        "ddai train ppo", logs, run_id, append=append, resume=bool(settings.get("resume"))
    )
    maybe_relaunch(**device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.ppo.train import run_ppo

    require_inputs(data, corpus)
    cfg = PPORunConfig(
        **run,
        data=data,
        corpus=corpus,
        **nested,
        **settings,
        **adapter,
        **preflight,
        critic=critic,
        critic_head=critic_head,
        critic_unfreeze=critic_unfreeze,
        run_id=run_id,
        logs=logs,
        progress=progress and not as_json,
    )
    result = asdict(run_or_fail(run_ppo, cfg))
    main_summary("ddai train ppo", result, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train ppo`` to the ``train`` group."""
    sub_app(app, "train", TRAIN_HELP).command(
        "ppo", short_help="PPO with a value-head critic and GAE over the search environment."
    )(train_ppo_command)
