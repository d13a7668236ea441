"""Advantage estimators: pure functions over tensors.

Shapes: ``B`` rollouts, ``T`` response positions. ``mask`` is 1 on the policy's own tokens and 0 on
observation tokens (search results, crops, the forced completion) and padding: *state masking*.
Every estimator treats mask-0 positions as absent: they neither discount, bootstrap nor reset, so
a multi-turn episode's early turns see the same outcome as its last one.

Conventions for group-normalised advantages (``grpo_advantages``):

- verl (``compute_grpo_outcome_advantage``): ``(r - mean_g) / (std_g + 1e-6)`` with the unbiased
  (Bessel-corrected) std; a one-rollout group keeps its raw reward (mean 0, std 1). This is the
  default here.
- TRL (``GRPOTrainer``, ``scale_rewards="group"``): also Bessel-corrected, but ``eps=1e-4``; pass
  ``eps=1e-4`` to match it. ``scale="batch"`` uses one std over the whole batch (TRL's
  ``scale_rewards="batch"``) and ``scale="none"`` only centres (Dr. GRPO).
- ``unbiased=False`` gives the population std that some GRPO write-ups use.

What training uses: PPO's ``gae`` (with ``outcome_rewards``, also the value head's); GRPO's
advantage is TRL's own, computed inside its trainer and named in ``ddai.trainer.grpo.advantage``.
``grpo_advantages``, ``reward_to_go`` and ``reinforcepp_advantages`` are the design contract's
public estimators (``DESIGN.md``: outside checks call ``grpo_advantages`` by name), tested against
verl and TRL; no trainer calls them. REINFORCE++ is spelled ``reinforcepp`` everywhere (the
pointer's ``--mode reinforcepp``); ``reinforce_pp_advantages`` still resolves, with a
``DeprecationWarning``, for one release.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ddai.trainer.rlmath import group_index, masked_whiten

__all__ = [
    "gae",
    "group_index",
    "grpo_advantages",
    "masked_whiten",
    "outcome_rewards",
    "reinforcepp_advantages",
    "reward_to_go",
]


# ---------------------------------------------------------------------------- helpers


def outcome_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """Place each rollout's scalar score ``[B]`` on its last policy token: ``[B,T]``.

    Rows with no policy token get all zeros.
    """
    m = mask.to(torch.bool)
    T = m.shape[1]
    pos = torch.arange(T, device=m.device).expand_as(m)
    last = torch.where(m, pos, torch.full_like(pos, -1)).max(dim=1).values  # [B]
    out = torch.zeros(m.shape, dtype=scores.dtype, device=scores.device)
    has = last >= 0
    out[has.nonzero(as_tuple=True)[0], last[has]] = scores[has]
    return out


# ---------------------------------------------------------------------------- outcome estimators


def grpo_advantages(
    rewards: Tensor,
    group_ids: Sequence[Any] | Tensor,
    *,
    unbiased: bool = True,
    eps: float = 1e-6,
    scale: str = "group",
) -> Tensor:
    """Group-normalised advantages (GRPO, Shao et al. 2024): one z-score per rollout.

    Args:
        rewards: ``[N]`` scalar reward per rollout.
        group_ids: ``[N]`` prompt id per rollout (any hashables or an integer tensor).
        unbiased: Bessel-corrected std (verl and TRL) or the population std.
        eps: added to the std (verl 1e-6, TRL 1e-4).
        scale: ``group`` (per-group std), ``batch`` (one std over all rollouts) or ``none``
            (centre only).

    Returns:
        ``[N]`` advantages. A group of one rollout keeps its raw reward (verl's convention: its
        mean is taken as 0 and its std as 1), whatever ``scale`` says.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"unknown scale {scale!r}; use one of 'group', 'batch', 'none'")
    r = rewards.to(torch.float64) if rewards.dtype == torch.float64 else rewards.float()
    idx = group_index(group_ids).to(r.device)
    G = int(idx.max()) + 1 if idx.numel() else 0
    count = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, idx, r) / count  # [G]
    dev2 = (r - mean[idx]) ** 2
    ss = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, idx, dev2)  # [G]
    denom = (count - 1).clamp(min=1) if unbiased else count
    std = (ss / denom).sqrt()  # [G]
    single = count[idx] == 1  # [N]
    if scale == "batch":
        std_n = r.std(unbiased=unbiased) if r.numel() > 1 else torch.ones((), dtype=r.dtype)
        std_n = std_n.expand_as(r)
    else:
        std_n = std[idx]
    adv = r - mean[idx]
    if scale != "none":
        adv = adv / (std_n + eps)
    return torch.where(single, r, adv).to(rewards.dtype)


def reward_to_go(rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Discounted reward-to-go over policy positions: ``G_t = r_t + γ·G_{t'}`` with ``t'`` the
    next mask-1 position after ``t``.

    Args:
        rewards: ``[B,T]`` per-position rewards; entries at mask-0 positions are ignored (put an
            outcome reward on the last policy token, see ``outcome_rewards``).
        mask: ``[B,T]`` 1 on policy tokens.
        gamma: discount per policy token.

    Returns:
        ``[B,T]`` returns, 0 at mask-0 positions. Observation spans neither discount nor reset the
        running return, so earlier turns keep the outcome reward (verl's REINFORCE++ loop resets it
        at every mask-0 position, which zeroes earlier turns of a multi-turn rollout).
    """
    m = mask.to(rewards.dtype)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    out = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        step = rewards[:, t] + gamma * running
        running = torch.where(m[:, t] > 0, step, running)
        out[:, t] = running * m[:, t]
    return out


def reinforcepp_advantages(
    rewards: Tensor, mask: Tensor, gamma: float = 1.0, *, eps: float = 1e-8
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025): reward-to-go whitened over the batch's policy tokens (per token;
    the pointer's one-step variant with a group baseline is
    ``ddai.trainer.pointer.losses.reinforcepp_advantages``).

    Args:
        rewards: ``[B,T]`` per-position rewards (outcome reward on the last policy token).
        mask: ``[B,T]`` 1 on policy tokens.
        gamma: discount per policy token.

    Returns:
        ``(advantages[B,T], returns[B,T])``; both 0 at mask-0 positions.
    """
    returns = reward_to_go(rewards, mask, gamma)
    adv = masked_whiten(returns, mask, eps=eps) * mask.to(returns.dtype)
    return adv, returns


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over policy positions.

    Mask-0 positions are skipped: the TD error at policy token ``t`` bootstraps from the value of
    the *next policy token* ``t'`` (``δ_t = r_t + γ·V_{t'} − V_t``, ``A_t = δ_t + γλ·A_{t'}``),
    with ``V = 0`` after the last one. This is verl's multi-turn GAE loop, without its final
    whitening (use ``masked_whiten``).

    Args:
        rewards: ``[B,T]``; entries at mask-0 positions are ignored.
        values: ``[B,T]`` value estimates; entries at mask-0 positions are ignored.
        mask: ``[B,T]`` 1 on policy tokens.
        gamma: discount; lam: GAE λ.

    Returns:
        ``(advantages[B,T], returns[B,T])`` with ``returns = advantages + values``; both 0 at
        mask-0 positions.
    """
    m = mask.to(values.dtype)
    B, T = rewards.shape
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros_like(next_value)
    adv = torch.zeros_like(values)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        on = m[:, t] > 0
        next_adv = torch.where(on, a_t, next_adv)
        next_value = torch.where(on, values[:, t], next_value)
        adv[:, t] = a_t * m[:, t]
    returns = (adv + values) * m
    return adv, returns


# Old spellings that still resolve for one release: old name -> current name.
_DEPRECATED = {"reinforce_pp_advantages": "reinforcepp_advantages"}


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(
            f"{__name__}.{name} is deprecated and will be removed in the next release: use {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
