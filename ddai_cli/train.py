"""CLI: ``ddai train sft`` and ``ddai train grpo`` (TRL-based): flags from ``SFTRunConfig`` and
``GRPORunConfig`` (``options``' shared specs for the fields every run of their kind has)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import typer

from ddai.cli.app import SUBCOMMANDS
from ddai.cli.common import JsonOpt, ProgressOpt
from ddai.cli.episode_train import episode_training, parsed_sets
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import INPUTS, LORA, POLICY, PREFLIGHT, TRL, default_of
from ddai.cli.running import device_options, main_summary, maybe_relaunch, sub_app
from ddai.cli.running import run_or_fail as run
from ddai.trainer.grpo.config import GRPORunConfig
from ddai.trainer.sft.config import SFTRunConfig

SFT_FLAGS = config_flags(
    SFTRunConfig,
    {
        **POLICY,
        "data": {"metavar": "<file>"},
        **TRL,
        **dict.fromkeys(("epochs", "batch_size", "grad_accum", "max_length")),
        "assistant_only_loss": "--assistant-only-loss/--no-assistant-only-loss",
        "image_root": None,
        **LORA,
    },
)
"""Every flag of ``train sft`` that fills an ``SFTRunConfig`` field."""

GRPO_FLAGS = config_flags(
    GRPORunConfig,
    {
        **POLICY,
        **INPUTS,
        **TRL,
        **dict.fromkeys(("preset", "n_agent", "batch_size", "loss_type", "temperature")),
        "epsilon": "--clip-low",
        "epsilon_high": "--clip-high",
        "beta": "--kl",
        "entropy_coef": "--entropy",
        "importance_sampling_level": "--ratio-level",
        "repetition_penalty": None,
        **dict.fromkeys(("observation", "image_root", "generator_max_images", "vllm")),
        "vllm_server_base_url": "--vllm-url",
        **PREFLIGHT,
        **LORA,
    },
)
"""Every flag of ``train grpo`` that fills a ``GRPORunConfig`` field (the nested episode settings
are ``options.episode_settings``)."""


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    train_app = sub_app(app, "train")

    @train_app.command("sft", short_help=SUBCOMMANDS["train"]["sft"].help)
    @with_groups({"cfg": SFT_FLAGS, "device": device_options})
    def sft(
        *,
        cfg: dict[str, Any],
        device: dict[str, Any],
        progress: ProgressOpt = default_of(SFTRunConfig, "progress"),
        as_json: JsonOpt = False,
    ) -> None:
        """Supervised fine-tuning with TRL's SFTTrainer on Searcher conversations."""
        maybe_relaunch(**device)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.sft.train import run_sft

        sets = parsed_sets(cfg)
        config = SFTRunConfig(**cfg, overrides=sets, progress=progress and not as_json)
        main_summary("ddai train sft", asdict(run(run_sft, config)), as_json=as_json)

    train_app.command("grpo", short_help=SUBCOMMANDS["train"]["grpo"].help)(
        episode_training(
            GRPORunConfig,
            GRPO_FLAGS,
            "ddai train grpo",
            "ddai.trainer.grpo.train:run_grpo",
            "GRPO over the multi-turn search environment; every step's rollouts go to the rollout log.",
        )
    )
