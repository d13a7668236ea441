"""PPO's optional objective terms from seed 003, as pure tensor math: reward normalization /
whitening of a batch's outcome scores, the KL to the reference as a *loss term* (instead of, or
as well as, a per-token reward penalty), and an entropy bonus; ``actor_loss`` combines them with
the clipped surrogate of ``losses.ppo_loss``.

Shapes: ``B`` rollouts, ``T`` completion positions, ``V`` vocabulary; ``mask[B,T]`` is 1 on
policy tokens. Every function returns detached metrics under ``actor/...`` or ``ppo/...``.

Value-function clipping is not here: ``value_losses.clipped_value_loss`` is PPO's critic loss.
Seed 003's pseudocode trains the critic with the plain ``critic_weight · (R − V)²``,
``critic_weight = 0.5``; that is exactly ``clipped_value_loss(clip=None)`` (``½·(V − R)²``,
``--vf-clip 0``). The clipped form ``½·max((V − R)², (clip(V, V_old ± c) − R)²)`` is the
reference-implementation detail the seed's source [4] lists among PPO's "N+ details".
"""

from __future__ import annotations

import torch
from torch import Tensor

from ddai.trainer.losses import ppo_loss
from ddai.trainer.ppo.clip_stats import RATIO_DEV_MAX
from ddai.trainer.ppo.config import KL_MODES, REWARD_NORMS
from ddai.trainer.rlmath import aggregate, kl_penalty, masked_mean

__all__ = [
    "KL_MODES",
    "REWARD_NORMS",
    "actor_loss",
    "kl_loss",
    "normalize_scores",
    "ratio_deviation_max",
    "token_entropy",
    "whiten",
]


def whiten(values: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Seed 003's ``whiten``: ``(x − mean) / (std + eps)``, or ``x / (std + eps)`` when
    ``shift_mean`` is False (for rewards: keeps their sign and the zero point). ``std`` is the
    unbiased standard deviation (``Tensor.std``), as in the seed; fewer than two values come back
    unchanged (no spread to divide by)."""
    if values.numel() < 2:
        return values
    mean = values.mean() if shift_mean else values.new_zeros(())
    return (values - mean) / (values.std() + eps)


def normalize_scores(scores: Tensor, mode: str = "none") -> Tensor:
    """Normalize a batch's outcome rewards ``[B]`` (before the KL penalty is folded in).

    - ``none``: unchanged.
    - ``center``: ``r − mean(r)`` (the seed's reward-model bias removal, over the batch).
    - ``scale``: ``whiten(r, shift_mean=False)``: the seed's reward whitening (sign kept).
    - ``whiten``: ``whiten(r)``: mean 0, std 1.
    """
    if mode not in REWARD_NORMS:
        raise ValueError(
            f"unknown reward normalization {mode!r}; use one of {', '.join(REWARD_NORMS)}"
        )
    if mode == "none":
        return scores
    if mode == "center":
        return scores - scores.mean()
    return whiten(scores, shift_mean=mode == "whiten")


def kl_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    *,
    kind: str = "k3",
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """The reference KL as a loss term: ``aggregate(k(log π_θ, log π_ref))`` with gradient through
    ``logp``.

    Why the estimator matters here (it does not for the reward penalty, which has no gradient):
    on samples of π_θ, ``∇k1 = ∇log π`` has expectation 0 (no pull towards the reference at all);
    ``∇k2 = (log π − log π_ref)·∇log π`` is the gradient of ``KL(π_θ ‖ π_ref)``; ``∇k3 =
    (1 − π_ref/π)·∇log π`` is the gradient of ``KL(π_ref ‖ π_θ)`` (GRPO's term).

    Args:
        logp: ``[B,T]`` current policy log-probs (with grad).
        ref_logp: ``[B,T]`` frozen reference log-probs.
        mask: ``[B,T]`` 1 on policy tokens.
        kind: ``k1``, ``k2`` or ``k3`` (``losses.KL_ESTIMATORS``).

    Returns:
        ``(loss, {"actor/kl_loss": ...})``.
    """
    loss = aggregate(kl_penalty(logp, ref_logp.detach(), kind), mask, loss_agg_mode)
    return loss, {"actor/kl_loss": float(loss.detach())}


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of each position's next-token distribution: ``logits[B,T,V]`` → ``[B,T]``,
    ``H = −Σ_v p_v log p_v``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # A −inf logit (a masked-out token) has p = 0 and log p = −inf: count it as 0·log 0 = 0, and
    # keep the −inf out of the product so the backward pass has no 0·∞ either.
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)


def ratio_deviation_max(logp: Tensor, old_logp: Tensor, mask: Tensor) -> float:
    """``max |exp(log π_θ − log π_old) − 1|`` over the policy tokens (``mask`` 1); 0 with none."""
    dev = (torch.exp((logp - old_logp).detach()) - 1).abs()
    picked = dev[mask.bool()]
    return float(picked.max()) if picked.numel() else 0.0


def actor_loss(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """The policy's loss: ``L = L_clip + β·KL_loss − c_H·mean H``.

    ``L_clip`` is ``losses.ppo_loss`` (token-mean); the KL term is added when ``ref_logp`` is
    given and ``kl_coef > 0`` (``--kl-mode loss``); the entropy bonus (``−c_H·H``, rewarding a
    spread-out next-token distribution) when ``entropy[B,T]`` is given and ``entropy_coef > 0``.
    All three are token means over the policy tokens.

    Returns:
        ``(loss, metrics)``: ``ppo_loss``'s metrics (``actor/clip_frac``: the share of policy
        tokens whose loss the clip changed) plus ``actor/pg_loss``, ``actor/ratio_dev_max``, and
        ``actor/kl_loss`` / ``actor/entropy`` when those terms are on.
    """
    loss, metrics = ppo_loss(logp, old_logp, adv, mask, eps_low=eps_low, eps_high=eps_high)
    metrics["actor/pg_loss"] = float(loss.detach())
    metrics[RATIO_DEV_MAX] = ratio_deviation_max(logp, old_logp, mask)
    if ref_logp is not None and kl_coef > 0:
        kl, kl_metrics = kl_loss(logp, ref_logp, mask, kind=kl_kind)
        loss = loss + kl_coef * kl
        metrics.update(kl_metrics)
    if entropy is not None and entropy_coef > 0:
        h = masked_mean(entropy, mask)
        loss = loss - entropy_coef * h
        metrics["actor/entropy"] = float(h.detach())
    return loss, metrics
