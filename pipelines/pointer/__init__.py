"""Data for the pointer selector (seed 002): the synthetic VQA world and its deterministic
simulator, the embedding store, VQA prompts and scoring, generation records and statistics.

The model, decoding, losses and training live in ``ddai.trainer.pointer``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

DEFAULT_THRESHOLD = 1.0
"""The default correctness threshold of a VQA answer: full VQAv2 credit, i.e. at least 4 of 10
annotators gave it (here, not in ``vqa``, so that configs read it without loading the backends)."""


def one_of(value: str, known: Collection[str], what: str) -> str:
    """``value`` if it is one of ``known``, else a ``ValueError`` naming every known one."""
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")
    return value


@dataclass(frozen=True, kw_only=True)
class Rerun:
    """A pointer step that skips its work when its inputs and parameters are unchanged (its
    manifest says so), unless forced."""

    force: bool = False
    """Rerun even if inputs and parameters are unchanged."""
