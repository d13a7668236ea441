"""The TRL internals ``DdaiGRPOTrainer`` relies on, checked against the installed TRL.

``DdaiGRPOTrainer`` overrides two private ``GRPOTrainer`` methods and calls TRL helpers that are
not public API; ``pyproject.toml`` pins ``trl`` to the minor range they were tested with. When TRL
changes any of them, ``check_trl_internals`` names what changed instead of letting a run fail
deep inside a training step (the test suite runs it; so does every GRPO run).
"""

from __future__ import annotations

import inspect
from typing import Any

TESTED_TRL = ">=1.16,<1.17"
"""The ``trl`` range in ``pyproject.toml``."""

# Method -> the leading parameters (names and order) the override and its callers use.
GRPO_METHODS: dict[str, tuple[str, ...]] = {
    "_generate_and_score_completions": ("self", "inputs"),
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
    ),
}
# Attributes of a built GRPOTrainer the rollout reads: name -> why.
GRPO_ATTRIBUTES = {
    "rollout_func": "GRPOTrainer(rollout_func=…) drives the multi-turn episodes",
}


class TRLInternalsChanged(RuntimeError):
    """The installed TRL no longer matches what ``DdaiGRPOTrainer`` overrides."""


def _problems(grpo_cls: Any) -> list[str]:
    out = []
    for name, want in GRPO_METHODS.items():
        fn = getattr(grpo_cls, name, None)
        if fn is None:
            out.append(f"GRPOTrainer.{name} is gone")
            continue
        got = tuple(inspect.signature(fn).parameters)[: len(want)]
        if got != want:
            out.append(f"GRPOTrainer.{name}{got} no longer starts with {want}")
    init = inspect.signature(grpo_cls.__init__).parameters
    for name, why in GRPO_ATTRIBUTES.items():
        if name not in init:
            out.append(f"GRPOTrainer.__init__ has no `{name}` ({why})")
    try:
        from trl.distributed import DistributedBackend
        from trl.models import unwrap_model_for_generation
    except ImportError as e:
        out.append(f"TRL helper import failed: {e}")
    else:
        if (
            "gather_deepspeed3_params"
            not in inspect.signature(unwrap_model_for_generation).parameters
        ):
            out.append("trl.models.unwrap_model_for_generation lost gather_deepspeed3_params")
        if not hasattr(DistributedBackend, "summon_full_params"):
            out.append("trl.distributed.DistributedBackend.summon_full_params is gone")
    if "self._dist =" not in inspect.getsource(grpo_cls.__init__):
        out.append("GRPOTrainer.__init__ no longer sets self._dist (a DistributedBackend)")
    return out


def check_trl_internals(grpo_cls: Any | None = None) -> None:
    """Raise ``TRLInternalsChanged`` naming every TRL internal that changed."""
    import trl

    if grpo_cls is None:
        from trl import GRPOTrainer as grpo_cls
    problems = _problems(grpo_cls)
    if problems:
        raise TRLInternalsChanged(
            f"trl {trl.__version__} changed internals ddai's GRPO trainer overrides "
            f"(tested with trl{TESTED_TRL}): " + "; ".join(problems) + ". Install a tested "
            f"version (pip install 'trl{TESTED_TRL}') or update ddai/trainer/grpo/train.py."
        )
