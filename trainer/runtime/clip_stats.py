"""What a GRPO/GSPO run's clip did: in how many optimizer steps it acted, and how far the
importance ratio moved from 1 where it could move at all.

TRL logs the clipped share per step (``clip_ratio/*``, kept in the run's ``train_metrics`` side
table); a share of 0 at every step reads the same whether the clip was inert (the ratio moved,
but less than ε: gspo-ddai at its own lr 1e-6 on a small model moves it 3.9e-5 against ε 3e-4)
or could not act (every mini-batch was the first trained after its rollouts were generated, so
its old log-probs are the current ones and the ratio is 1). ``ClipStats`` keeps the two apart:
``observe`` takes one mini-batch's largest ``|ratio − 1|`` and clipped share, and says whether an
optimizer step came between the mini-batch's generation and its loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLIP_LOSSES = frozenset({"grpo", "bnpo", "dr_grpo", "dapo", "luspo"})
"""TRL loss types whose ratio is clipped to ``[1 − ε_low, 1 + ε_high]`` (cispo, sapo and vespo
weigh the ratio otherwise)."""


@dataclass
class ClipStats:
    """The clip's record over a run (main process: every value already reduced over ranks)."""

    epsilon_low: float
    epsilon_high: float
    acted_steps: set[int] = field(default_factory=set)
    """Optimizer steps in which some mini-batch had a clipped token or sequence."""
    first: int = 0
    """Mini-batches trained first after their generation: ratio 1 (up to float rounding when the
    old log-probs were computed at generation time), so no clip can act."""
    after_update: int = 0
    """Mini-batches trained after an optimizer step since their generation: the ratio can move."""
    spread: float | None = None
    """Largest ``|ratio − 1|`` over the ``after_update`` mini-batches (None: there were none)."""

    def observe(self, step: int, *, after_update: bool, spread: float, clipped: float) -> None:
        """One mini-batch of optimizer step ``step``: its largest ``|ratio − 1|`` and the share of
        its tokens (sequences, under GSPO) the clip acted on."""
        if clipped > 0:
            self.acted_steps.add(step)
        if after_update:
            self.after_update += 1
            self.spread = spread if self.spread is None else max(self.spread, spread)
        else:
            self.first += 1

    def result_fields(self) -> dict[str, Any]:
        """The summary's clip fields (``GRPOResult``)."""
        return {
            "clip_acted_steps": len(self.acted_steps),
            "ratio_spread": self.spread,
            "minibatches_after_update": self.after_update,
            "minibatches_first": self.first,
            "epsilon_low": self.epsilon_low,
            "epsilon_high": self.epsilon_high,
        }


def no_clip_fields() -> dict[str, Any]:
    """The clip fields of a run whose loss has no clip (or that trained no step): all None."""
    return dict.fromkeys(ClipStats(0.0, 0.0).result_fields())
