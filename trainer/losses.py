"""Loss functions: pure tensor math, each returning ``(loss, metrics)``.

Shapes: ``B`` rollouts, ``T`` response positions; ``mask[B,T]`` is 1 on policy tokens and 0 on
observation tokens and padding (state masking), so masked positions never reach a gradient.
Metric keys are namespaced (``actor/...``) and hold detached scalars.

Sections: policy losses (GSPO, PPO) and reward-weighted CE. Masked means, loss aggregation and the
KL estimators are ``ddai.trainer.rlmath``'s (re-exported here); value-head losses are
``ddai.trainer.value.losses``'s.

What training uses: PPO's ``ppo_loss`` (``ddai.trainer.ppo.terms``) and ``ratio_spread`` (GRPO's
clip record); GRPO's and GSPO's loss is TRL's own. ``gspo_loss`` (the design contract's public
GSPO, checked against TRL's trainer in ``tests/trainer/test_trainer_trl_equivalence.py``) and
``rce_loss`` are pure references no trainer calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ddai.trainer.rlmath import (
    AGG_MODES,
    KL_ESTIMATORS,
    aggregate,
    group_index,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_penalty,
    masked_mean,
)

__all__ = [
    "AGG_MODES",
    "KL_ESTIMATORS",
    "aggregate",
    "gspo_loss",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalty",
    "masked_mean",
    "ppo_loss",
    "ratio_spread",
    "rce_loss",
]

Metrics = dict[str, float]


# ---------------------------------------------------------------------------- policy losses


def _clip_metrics(
    ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float, mask: Tensor
) -> Metrics:
    low = ((ratio < 1 - eps_low) & (adv < 0)).to(mask.dtype)
    high = ((ratio > 1 + eps_high) & (adv > 0)).to(mask.dtype)
    return {
        "actor/clip_frac_low": float(masked_mean(low.expand(mask.shape), mask)),
        "actor/clip_frac_high": float(masked_mean(high.expand(mask.shape), mask)),
    }


def ratio_spread(logp: Tensor, old_logp: Tensor, mask: Tensor, level: str = "sequence") -> float:
    """Largest ``|ratio − 1|`` of a mini-batch (0 without a policy token): over the policy tokens
    of ``[B,T]`` log-probs (``level="token"``), or over the rows' length-normalised sequence ratios
    ``exp(mean_t∈policy (logp − old_logp))`` (``"sequence"``, GSPO; as ``gspo_loss`` and TRL's
    ``importance_sampling_level`` form them)."""
    m = mask.to(torch.bool)
    log_ratio = (logp - old_logp).detach().float()
    if level == "token":
        vals = log_ratio[m]
    elif level == "sequence":
        has = m.any(-1)
        n_tok = m.sum(-1).clamp(min=1)
        vals = ((log_ratio * m).sum(-1) / n_tok)[has]
    else:
        raise ValueError(f"unknown importance sampling level {level!r}: token or sequence")
    if vals.numel() == 0:
        return 0.0
    return float((torch.exp(vals) - 1).abs().max())


def gspo_loss(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[Tensor, Metrics]:
    """GSPO (Zheng et al. 2025): PPO-style clipping of a sequence-level importance ratio.

    ``s_i = exp(mean_t∈policy (log π_θ − log π_old))`` (the length-normalised sequence ratio over
    mask-1 tokens only), ``L_i = −min(s_i·A_i, clip(s_i, 1−ε_low, 1+ε_high)·A_i)``, then
    aggregated (``seq-mean-token-mean`` by default, which is exactly TRL's
    ``importance_sampling_level="sequence"``, ``loss_type="grpo"``, ``beta=0``). The gradient of
    an unclipped row is ``−A_i·s_i·mean_t ∇log π_θ``, the same as verl's token-level
    ``sg[s_i]·π/sg[π]`` form.

    Args:
        logp: ``[B,T]`` log-probs of the sampled tokens under the current policy (with grad).
        old_logp: ``[B,T]`` log-probs under the policy that sampled them.
        adv: ``[B]`` one advantage per rollout.
        mask: ``[B,T]`` 1 on policy tokens.
        eps_low, eps_high: clip range ``[1−ε_low, 1+ε_high]`` (DDAI: 3e-4, 4e-4).
        loss_agg_mode: see ``aggregate``.

    Returns:
        ``(loss, metrics)``: scalar loss; ``actor/ratio_mean``, ``actor/ppo_kl``,
        ``actor/clip_frac_low``, ``actor/clip_frac_high``.
    """
    m = mask.to(logp.dtype)
    n_tok = m.sum(-1).clamp(min=1)  # [B]
    log_ratio = (logp - old_logp) * m  # [B,T]
    seq_ratio = torch.exp(log_ratio.sum(-1) / n_tok).unsqueeze(-1)  # [B,1]
    a = adv.reshape(-1, 1).to(logp.dtype)  # [B,1]
    clipped = seq_ratio.clamp(1 - eps_low, 1 + eps_high)
    per_seq = -torch.min(seq_ratio * a, clipped * a)  # [B,1]
    loss = aggregate(per_seq, mask, loss_agg_mode)
    has = m.sum(-1) > 0
    metrics = {
        "actor/ratio_mean": float(seq_ratio.detach().squeeze(-1)[has].mean()) if has.any() else 1.0,
        "actor/ppo_kl": float(masked_mean((old_logp - logp).detach(), mask)),
        **_clip_metrics(seq_ratio.detach(), a, eps_low, eps_high, mask),
    }
    return loss, metrics


def ppo_loss(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, Metrics]:
    """PPO's clipped token-level surrogate (Schulman et al. 2017), with asymmetric and dual clip.

    ``r_t = exp(log π_θ − log π_old)``, ``L_t = max(−A_t·r_t, −A_t·clip(r_t, 1−ε_low, 1+ε_high))``;
    with ``dual_clip = c > 1`` (Ye et al. 2020), negative-advantage tokens are further bounded by
    ``min(L_t, −A_t·c)`` so a huge ratio cannot blow the loss up.

    Args:
        logp, old_logp: ``[B,T]``.
        adv: ``[B,T]`` per-token advantages, or ``[B]`` broadcast over tokens.
        mask: ``[B,T]`` 1 on policy tokens.
        eps_low, eps_high: asymmetric clip range (DAPO's clip-higher when ``eps_high > eps_low``).
        dual_clip: the ratio bound ``c`` for negative advantages, or None.
        loss_agg_mode: see ``aggregate``.

    Returns:
        ``(loss, metrics)``: ``actor/ppo_kl``, ``actor/clip_frac``, ``actor/clip_frac_dual``,
        ``actor/clip_frac_low``, ``actor/clip_frac_high``.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(
            f"dual_clip must be > 1 (the ratio bound for negative advantages), got {dual_clip}"
        )
    a = adv if adv.dim() == 2 else adv.reshape(-1, 1)
    a = a.to(logp.dtype).expand_as(logp)  # [B,T]
    ratio = torch.exp(logp - old_logp)  # [B,T]
    l1 = -a * ratio
    l2 = -a * ratio.clamp(1 - eps_low, 1 + eps_high)
    clipped = torch.maximum(l1, l2)  # [B,T]
    metrics = {
        "actor/ppo_kl": float(masked_mean((old_logp - logp).detach(), mask)),
        "actor/clip_frac": float(masked_mean((l2 > l1).to(logp.dtype), mask)),
        **_clip_metrics(ratio.detach(), a, eps_low, eps_high, mask),
    }
    if dual_clip is not None:
        l3 = -a * dual_clip
        bounded = torch.minimum(clipped, l3)
        dual = ((clipped > l3) & (a < 0)).to(logp.dtype)
        metrics["actor/clip_frac_dual"] = float(masked_mean(dual, mask))
        clipped = torch.where(a < 0, bounded, clipped)
    else:
        metrics["actor/clip_frac_dual"] = 0.0
    return aggregate(clipped, mask, loss_agg_mode), metrics


# ---------------------------------------------------------------------------- reward-weighted CE


def rce_loss(
    logp: Tensor,
    rewards: Tensor,
    mask: Tensor,
    *,
    group_ids: Sequence[Any] | Tensor | None = None,
    temperature: float = 1.0,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[Tensor, Metrics]:
    """Reward-weighted cross-entropy (seed 002's RCE warm-up; reward-weighted regression).

    Each rollout's negative log-likelihood is weighted by ``w_i = n_g · softmax_g(r / τ)_i``
    within its group ``g`` (all rollouts form one group when ``group_ids`` is None), so weights
    average 1 per group: a high temperature is plain SFT on every rollout, a low one imitates only
    the group's best. Weights carry no gradient.

    Args:
        logp: ``[B,T]`` log-probs of the rollout tokens under the current policy.
        rewards: ``[B]``.
        mask: ``[B,T]`` 1 on policy tokens.
        group_ids: ``[B]`` prompt id per rollout, or None.
        temperature: τ > 0 (seed 002 anneals it from 2.0 to 0.5).
        loss_agg_mode: see ``aggregate``.

    Returns:
        ``(loss, metrics)``: ``actor/rce_weight_max``, ``actor/rce_nll``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    r = rewards.detach().to(logp.dtype) / temperature  # [B]
    idx = group_index(group_ids) if group_ids is not None else torch.zeros(len(r), dtype=torch.long)
    idx = idx.to(r.device)
    G = int(idx.max()) + 1 if idx.numel() else 0
    # Stable group softmax: subtract each group's max before exponentiating.
    gmax = torch.full((G,), -torch.inf, dtype=r.dtype, device=r.device).scatter_reduce(
        0, idx, r, reduce="amax"
    )
    e = torch.exp(r - gmax[idx])
    gsum = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, idx, e)
    gcount = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(e))
    w = (e / gsum[idx] * gcount[idx]).unsqueeze(-1)  # [B,1]
    loss = aggregate(-w * logp, mask, loss_agg_mode)
    metrics = {
        "actor/rce_weight_max": float(w.max()) if w.numel() else 0.0,
        "actor/rce_nll": float(masked_mean(-logp.detach(), mask)),
    }
    return loss, metrics
