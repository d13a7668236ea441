"""Seed 004's joint stage (``verifiable_mc_hybrid``) as pure tensor math.

The policy's token loss is weighted by the critic's TD error, on correct rollouts only:

- ``δ_t``: the GAE advantage of the critic over policy tokens, with the outcome (1 correct,
  0 wrong) as the reward on the last policy token. With the seed's ``γ = λ = 1`` this is the
  Monte-Carlo error ``δ_t = R − V(s_t)``.
- ``w_t = clip(exp(δ_t / β), weight_clip_min, weight_clip_max)`` on policy tokens of correct
  rollouts; 0 on prompt/observation tokens, padding and every token of a wrong rollout.
  The weights carry no gradient (the critic is trained by its own loss, not through the CE).
- weighted CE: ``Σ w_t · ce_t / Σ m_t`` over the policy tokens ``m`` of the correct rollouts (a
  token mean in which each token counts ``w_t`` times; ``w ≡ 1`` is plain SFT on them).
- total: ``weighted_ce + value_loss_coef · value_loss`` (the seed's yaml comments
  ``value_loss_coef: 0.05`` as "CE loss 계수"; ddai reads the key by its name, see
  ``ValueSFTConfig``).

Shapes: ``B`` rollouts, ``T`` completion positions; ``values[:, t]`` is the critic's estimate of
the state before completion token ``t``, aligned with the policy's logits for that token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ddai.trainer.advantages import gae, outcome_rewards
from ddai.trainer.value.config import TDWeightConfig

Metrics = dict[str, float]


def td_errors(
    values: Tensor,
    rewards: Tensor,
    mask: Tensor,
    *,
    gamma: float = TDWeightConfig.gamma,
    lam: float = TDWeightConfig.lam,
) -> Tensor:
    """``[B,T]`` TD(λ) errors of the critic: GAE of the outcome reward over policy tokens.

    Args:
        values: ``[B,T]`` critic values (used detached).
        rewards: ``[B]`` outcome per rollout (1 correct, 0 wrong).
        mask: ``[B,T]`` 1 on policy tokens.

    Returns:
        ``[B,T]``; ``R − V_t`` when ``γ = λ = 1``; 0 where ``mask`` is 0.
    """
    m = mask.to(values.dtype)
    per_token = outcome_rewards(rewards.to(values.dtype), m)
    adv, _ = gae(per_token, values.detach(), m, gamma, lam)
    return adv * m


def td_weights(
    values: Tensor, rewards: Tensor, mask: Tensor, correct: Tensor, cfg: TDWeightConfig
) -> tuple[Tensor, Tensor]:
    """Per-token weights ``w[B,T]`` and the CE mask ``[B,T]`` (policy tokens of correct rollouts).

    ``w_t = clip(exp(δ_t/β), min, max)`` where the CE mask is 1, else 0; no gradient.
    ``correct``: ``[B]`` bool.
    """
    delta = td_errors(values, rewards, mask, gamma=cfg.gamma, lam=cfg.lam)
    ce_mask = mask.to(values.dtype) * correct.to(values.dtype)[:, None]
    w = torch.exp(delta / cfg.beta).clamp(cfg.weight_clip_min, cfg.weight_clip_max)
    return (w * ce_mask).detach(), ce_mask


def weight_stats(weights: Tensor, ce_mask: Tensor, cfg: TDWeightConfig) -> Metrics:
    """Mean weight and the shares of CE tokens clipped at each bound (``joint/weight_*``).

    A token counts as clipped when its weight sits on the bound (``exp`` reached or passed it)."""
    n = float(ce_mask.sum())
    if n == 0:
        nan = float("nan")
        return {"joint/weight_mean": nan, "joint/clip_low": nan, "joint/clip_high": nan}
    on = ce_mask > 0
    w = weights[on]
    return {
        "joint/weight_mean": float(w.mean()),
        "joint/clip_low": float((w <= cfg.weight_clip_min).sum()) / n,
        "joint/clip_high": float((w >= cfg.weight_clip_max).sum()) / n,
    }


CE_CHUNK = 512
"""Token positions whose logits ``chunked_token_ce`` holds at a time."""


def _rows_ce(hidden: Tensor, targets: Tensor, lm_head: torch.nn.Module) -> Tensor:
    """``[c]`` CE of ``targets[c]`` from ``hidden[c, H]``: logits ``[c, V]`` in the model's dtype,
    the log-sum-exp summed in float32 (no float32 copy of the logits)."""
    logits = lm_head(hidden)
    top = logits.detach().amax(-1, keepdim=True)
    total = torch.exp(logits - top).sum(-1, dtype=torch.float32)
    picked = logits.gather(-1, targets[:, None]).squeeze(-1)
    return top.squeeze(-1).float() + torch.log(total) - picked.float()


def chunked_token_ce(
    hidden: Tensor, lm_head: torch.nn.Module, targets: Tensor, mask: Tensor, chunk: int = CE_CHUNK
) -> Tensor:
    """``[B,T]`` float32 cross-entropy of ``targets[B,T]`` at the positions where ``mask[B,T]``
    is set (0 elsewhere), from the hidden states ``[B,T,H]`` that predict them.

    Only the masked positions reach the LM head, ``chunk`` at a time, each chunk recomputed in
    the backward (activation checkpointing): at most one ``[chunk, V]`` block of logits is alive,
    in the model's dtype, where a plain cross-entropy holds ``[B,T,V]`` and a float32 copy of it."""
    from torch.utils.checkpoint import checkpoint

    on = mask > 0
    h, y = hidden[on], targets[on]  # [n, H], [n]
    out = torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device)
    if not len(y):
        return out + 0.0 * hidden.sum()  # keep the graph (DDP expects every parameter used)
    parts = [
        checkpoint(_rows_ce, h[i : i + chunk], y[i : i + chunk], lm_head, use_reentrant=False)
        for i in range(0, len(y), chunk)
    ]
    return out.index_put((on,), torch.cat(parts))


def weighted_ce(ce: Tensor, weights: Tensor, ce_mask: Tensor) -> Tensor:
    """``Σ w·ce / Σ ce_mask``: scalar; 0 (with a graph) when the batch has no correct rollout."""
    return (ce * weights).sum() / ce_mask.sum().clamp(min=1.0)


def joint_loss(weighted: Tensor, value_loss: Tensor, value_loss_coef: float) -> Tensor:
    """Seed 004's total: ``weighted_ce + value_loss_coef · value_loss``."""
    return weighted + value_loss_coef * value_loss
