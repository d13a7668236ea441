"""The value room's public surface: what another room (PPO's critic) builds, feeds, trains, saves
and loads from it. Rooms outside ``trainer/value`` import the value head from here only
(``tests/test_architecture.py`` checks it), so the room's own modules may change shape freely."""

from __future__ import annotations

from ddai.trainer.value.data import Batch, pad_batch
from ddai.trainer.value.losses import clipped_value_loss, kl_penalized_rewards, sequence_mean
from ddai.trainer.value.model import (
    HEAD_TYPES,
    ValueModel,
    build_head,
    load_value_model,
    new_value_model,
    save_value_model,
)

__all__ = [
    "HEAD_TYPES",
    "Batch",
    "ValueModel",
    "build_head",
    "clipped_value_loss",
    "kl_penalized_rewards",
    "load_value_model",
    "new_value_model",
    "pad_batch",
    "save_value_model",
    "sequence_mean",
]
