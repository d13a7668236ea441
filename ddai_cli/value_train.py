"""CLI: ``ddai train value`` (added to the ``train`` group): flags from ``ValueTrainConfig``
(``ddai.trainer.value.config``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.flags import config_flags
from ddai.cli.value_fit import FIT, value_training
from ddai.trainer.value.config import ValueTrainConfig

TRAIN_FLAGS = config_flags(
    ValueTrainConfig, FIT | dict.fromkeys(("head", "unfreeze", "dropout", "grad_clip"))
)


@value_training(ValueTrainConfig, TRAIN_FLAGS, "ddai train value")
def train_value_command() -> Callable[[Any], Any]:
    """Train a value head on terminal outcomes from the rollout log: pairwise ranking + MC MSE."""
    from ddai.trainer.value.train import train_value

    return train_value


register = subcommand("train", "value", train_value_command)
