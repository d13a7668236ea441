"""Data for the pointer selector (seed 002): the synthetic VQA world and its deterministic
simulator, the embedding store, VQA prompts and scoring, generation records and statistics.

The model, decoding, losses and training live in ``ddai.trainer.pointer``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Rerun:
    """A pointer step that skips its work when its inputs and parameters are unchanged (its
    manifest says so), unless forced."""

    force: bool = False
    """Rerun even if inputs and parameters are unchanged."""
