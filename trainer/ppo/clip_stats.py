"""How often PPO's clip acted over a run, and the warning when it never did.

At DDAI's learning rate (1e-6) the policy barely moves between the rollout and the last
mini-batch, so the ratio ``r_t = π_θ/π_old`` can stay inside ``[1 − ε, 1 + ε]`` for the whole run:
the clip is then inert and each update is a plain policy gradient. Each step's
``actor/clip_frac`` (the share of policy tokens whose loss the clip changed) is in
``metrics.jsonl``; ``ClipStats`` folds the steps into the summary's ``clip_frac_mean``,
``clip_acted_steps`` and ``ratio_spread`` (the largest ``|r_t − 1|`` seen), and
``clip_never_acted`` words the warning ``ddai train ppo`` prints after its summary. Imports no
torch (the CLI reads the warning from here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLIP_FRAC = "actor/clip_frac"
RATIO_DEV_MAX = "actor/ratio_dev_max"
"""The metric of the largest ``|r_t − 1|`` over policy tokens (a max wherever it is aggregated:
over micro-batches, epochs and ranks)."""


@dataclass
class ClipStats:
    """Every step's clip fraction and the largest ratio deviation of the run."""

    clip_low: float
    clip_high: float
    fractions: list[float] = field(default_factory=list)
    ratio_dev_max: float = 0.0

    def observe(self, metrics: dict[str, Any]) -> None:
        """One step's metrics (``actor/clip_frac``, ``actor/ratio_dev_max``); a metrics row
        without them (a resumed run's older rows) is skipped."""
        if metrics.get(CLIP_FRAC) is None:
            return
        self.fractions.append(float(metrics[CLIP_FRAC]))
        self.ratio_dev_max = max(self.ratio_dev_max, float(metrics.get(RATIO_DEV_MAX) or 0.0))

    def result_fields(self) -> dict[str, Any]:
        """The summary's clip fields (``PPOResult``)."""
        n = len(self.fractions)
        return {
            "clip_frac_mean": sum(self.fractions) / n if n else None,
            "clip_acted_steps": sum(f > 0 for f in self.fractions),
            "ratio_spread": self.ratio_dev_max if n else None,
            "clip_low": self.clip_low,
            "clip_high": self.clip_high,
        }


def clip_never_acted(summary: dict[str, Any]) -> str | None:
    """The warning for a run whose clip changed no token's loss in any step, or None."""
    mean, active = summary.get("clip_frac_mean"), summary.get("clip_acted_steps")
    if mean is None or active is None or active > 0:
        return None
    steps, dev = summary.get("steps") or 0, summary.get("ratio_spread") or 0.0
    low, high = summary.get("clip_low"), summary.get("clip_high")
    why = (
        "the ratio was exactly 1 throughout: with one --ppo-epochs pass over one mini-batch every "
        "update runs on the rollout's own policy"
        if dev == 0
        else f"the largest |ratio − 1| was {dev:.3g}, inside the clip range (ε = {low:g} below, "
        f"{high:g} above; {min(low, high) / dev:.3g}× the largest move)"
    )
    return (
        f"the PPO clip never acted in the run's {steps} step(s) (clip_frac 0 in every step): "
        f"{why}. Every update was an unclipped policy gradient; the clip only bounds the step "
        "once the policy moves further between rollout and update (a larger --lr, more "
        "--ppo-epochs or mini-batches per batch, or a smaller --clip-low/--clip-high)"
    )
