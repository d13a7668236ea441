"""Value-head references: TD(λ) targets over policy tokens (``ddai.trainer.advantages.gae``'s
returns) and the full-logits token cross-entropy the chunked one is checked against."""

from __future__ import annotations

import torch
from torch import Tensor

from ddai.trainer.advantages import gae


def td_lambda_targets(
    rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> Tensor:
    """TD(λ) value targets over policy tokens: the λ-return ``G^λ_t = A^GAE_t + V_t``.

    Observation spans are skipped (the next policy token bootstraps across them). With
    ``γ = λ = 1`` the target is the Monte-Carlo return (the outcome for an outcome-only reward);
    with ``λ = 0`` it is the one-step target ``r_t + γ·V_{t'}``.

    Args:
        rewards: ``[B,T]`` per-token rewards (``outcome_rewards`` puts a scalar on the last
            policy token).
        values: ``[B,T]`` current value estimates (used detached).
        mask: ``[B,T]`` 1 on policy tokens.

    Returns:
        ``[B,T]`` targets, 0 at mask-0 positions; no gradient.
    """
    _, returns = gae(rewards.detach(), values.detach(), mask, gamma, lam)
    return returns


def token_ce(logits: Tensor, targets: Tensor) -> Tensor:
    """``[B,T]`` cross-entropy of ``targets[B,T]`` under ``logits[B,T,V]`` (float32): the
    reference ``ddai.trainer.value.sft_math.chunked_token_ce`` is tested against."""
    return torch.nn.functional.cross_entropy(
        logits.float().flatten(0, 1), targets.flatten(), reduction="none"
    ).view(targets.shape)
