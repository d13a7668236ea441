"""Rare-success selection's settings (``Rank``, ``SelectConfig``): what ``ddai distill``'s config
reads, without the selection's table code (``pipelines/distill/select.py``, which re-exports
them)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ddai.pipelines.records.success import SUCCESS_THRESHOLD


class Rank(StrEnum):
    """How a prompt's successes are ordered for ``top_k`` (a flag's choices)."""

    DDAI = "ddai"
    REWARD = "reward"


RANKS: tuple[str, ...] = tuple(r.value for r in Rank)


@dataclass(frozen=True)
class SelectConfig:
    success_threshold: float = SUCCESS_THRESHOLD
    rate_max: float = 0.5
    top_k: int = 4
    rank: str = "reward"

    def __post_init__(self) -> None:
        if self.rank not in RANKS:
            raise ValueError(f"--rank {self.rank!r}: use one of {', '.join(RANKS)}")
        if not 0.0 < self.rate_max <= 1.0:
            raise ValueError(f"--success-rate-max must be in (0, 1], got {self.rate_max}")
        if self.top_k < 1:
            raise ValueError(f"--top-k must be >= 1, got {self.top_k}")
