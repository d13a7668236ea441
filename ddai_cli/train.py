"""CLI: ``ddai train grpo`` (TRL-based): flags from ``GRPORunConfig`` (``options``' shared specs
for the fields every run of its kind has). ``ddai train sft`` is ``ddai_cli/train_sft.py``'s."""

from __future__ import annotations

from ddai.cli.app import subcommand
from ddai.cli.episode_train import episode_training
from ddai.cli.flags import config_flags
from ddai.cli.options import INPUTS, LORA, POLICY, PREFLIGHT, TRL
from ddai.trainer.grpo.config import GRPORunConfig

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


register = subcommand(
    "train",
    "grpo",
    episode_training(
        GRPORunConfig,
        GRPO_FLAGS,
        "ddai train grpo",
        "ddai.trainer.grpo.train:run_grpo",
        "GRPO over the multi-turn search environment; every step's rollouts go to the rollout log.",
    ),
)
