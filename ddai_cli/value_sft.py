"""CLI: ``ddai train value-sft`` (seed 004's joint stage: TD-weighted SFT with the critic; added
to the ``train`` group): flags from ``ValueSFTConfig`` (``ddai.trainer.value.config``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.flags import config_flags
from ddai.cli.value_fit import FIT, value_training
from ddai.trainer.value.config import ValueSFTConfig

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


register = subcommand("train", "value-sft", train_value_sft_command)
