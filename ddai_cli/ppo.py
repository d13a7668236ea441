"""CLI: ``ddai train ppo`` (added to the ``train`` group): PPO over the multi-turn search
environment with a value head as critic (``ddai.trainer.ppo``); flags from ``PPORunConfig``."""

from __future__ import annotations

from ddai.cli.app import subcommand
from ddai.cli.episode_train import episode_training
from ddai.cli.flags import config_flags
from ddai.cli.options import INPUTS, LORA, POLICY, PREFLIGHT
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


register = subcommand(
    "train",
    "ppo",
    episode_training(
        PPORunConfig,
        PPO_FLAGS,
        "ddai train ppo",
        "ddai.trainer.ppo.train:run_ppo",
        "PPO over the multi-turn search environment, with a value head as critic and GAE.",
    ),
)
