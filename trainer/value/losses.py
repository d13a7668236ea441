"""Value-head and PPO critic math: pure functions over tensors, each loss returning
``(loss, metrics)`` (seeds 003 and 004).

Shapes: ``B`` rollouts, ``T`` completion positions; ``values[:, t]`` is the critic's estimate of
the state *before* completion token ``t`` (the hidden state of the token preceding it, the same
shift as the policy's logits). ``mask[B,T]`` is 1 on the policy's own tokens and 0 on observation
tokens and padding, so observations never get a value target.

- ``mc_value_loss``: Monte-Carlo tokenwise MSE: the terminal reward broadcast to every policy token.
- ``pairwise_ranking_loss``: ``-log σ(v⁺ − v⁻)`` on sequence-mean values of a successful and a
  failed rollout of the same prompt.
- ``hybrid_value_loss``: ``pairwise_coef · pairwise + mc_coef · (MC⁺ + MC⁻)/2`` (seed 004's mix).
- ``kl_penalized_rewards``: per-token rewards ``−β·KL_t`` plus the outcome on the last policy token.
- ``clipped_value_loss``: PPO's (optionally clipped) critic loss.
- ``roc_auc``, ``pairwise_accuracy``: held-out ranking quality of a value head.

Metric keys are namespaced (``value/...`` for value-head training, ``critic/...`` in PPO).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ddai.trainer.advantages import outcome_rewards
from ddai.trainer.rlmath import aggregate, kl_penalty, masked_mean

__all__ = [
    "clipped_value_loss",
    "hybrid_value_loss",
    "kl_penalized_rewards",
    "mc_value_loss",
    "pairwise_accuracy",
    "pairwise_ranking_loss",
    "roc_auc",
    "sequence_mean",
]

Metrics = dict[str, float]


def sequence_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of each row of ``values[B,T]`` over its mask-1 positions: ``[B]`` (0 for an empty row)."""
    m = mask.to(values.dtype)
    return (values * m).sum(-1) / m.sum(-1).clamp(min=1)


def mc_value_loss(
    values: Tensor, rewards: Tensor, attention_mask: Tensor, response_mask: Tensor
) -> tuple[Tensor, Metrics]:
    """Monte-Carlo tokenwise MSE (seed 004): every policy token regresses on the outcome.

    Args:
        values: ``[B,T]`` value estimates (with grad).
        rewards: ``[B]`` terminal rewards (correct 1, incorrect 0), broadcast to every token; or
            ``[B,T]`` per-token targets (e.g. ``td_lambda_targets``). Targets carry no gradient.
        attention_mask: ``[B,T]`` 1 on real tokens (0 on padding).
        response_mask: ``[B,T]`` 1 on policy tokens (0 on the prompt and on observations).

    Returns:
        ``(loss, metrics)``: ``Σ (v − R)²·m / Σ m`` with ``m = attention_mask·response_mask``;
        ``value/mc_mse``.
    """
    targets = rewards.detach().to(values.dtype)
    if targets.dim() == 1:
        targets = targets.unsqueeze(-1)  # [B,1], broadcast over T
    m = attention_mask.to(values.dtype) * response_mask.to(values.dtype)
    loss = masked_mean((values - targets) ** 2, m)
    return loss, {"value/mc_mse": float(loss.detach())}


def pairwise_ranking_loss(
    pos_values: Tensor, neg_values: Tensor, pos_mask: Tensor, neg_mask: Tensor
) -> tuple[Tensor, Metrics]:
    """Pairwise ranking loss (seed 004): ``mean_i −log σ(v⁺_i − v⁻_i)``.

    ``v`` is a rollout's sequence-mean value over its policy tokens; row ``i`` of the positive
    and negative batches form one pair (a successful and a failed rollout of one prompt). The two
    batches may be padded to different lengths.

    Args:
        pos_values: ``[P,T⁺]``; neg_values: ``[P,T⁻]``.
        pos_mask: ``[P,T⁺]``; neg_mask: ``[P,T⁻]``: 1 on policy tokens.

    Returns:
        ``(loss, metrics)``: ``value/pairwise_loss``, ``value/pairwise_acc`` (share of pairs with
        ``v⁺ > v⁻``), ``value/margin`` (mean ``v⁺ − v⁻``).
    """
    diff = sequence_mean(pos_values, pos_mask) - sequence_mean(neg_values, neg_mask)  # [P]
    loss = -F.logsigmoid(diff).mean()
    d = diff.detach()
    return loss, {
        "value/pairwise_loss": float(loss.detach()),
        "value/pairwise_acc": float((d > 0).float().mean()) if d.numel() else 0.0,
        "value/margin": float(d.mean()) if d.numel() else 0.0,
    }


def hybrid_value_loss(
    pos_values: Tensor,
    neg_values: Tensor,
    pos_mask: Tensor,
    neg_mask: Tensor,
    *,
    pos_rewards: Tensor | None = None,
    neg_rewards: Tensor | None = None,
    pairwise_coef: float = 1.0,
    mc_coef: float = 0.5,
) -> tuple[Tensor, Metrics]:
    """Seed 004's hybrid: ``pairwise_coef·pairwise + mc_coef·(MC(pos) + MC(neg))/2``.

    Args:
        pos_values, neg_values, pos_mask, neg_mask: as in ``pairwise_ranking_loss``.
        pos_rewards, neg_rewards: ``[P]`` MC targets (default 1 and 0: terminal success).
        pairwise_coef, mc_coef: the coefficients; a zero coefficient skips its term.

    Returns:
        ``(loss, metrics)``: ``value/loss`` plus the metrics of both parts (always computed).
    """
    P = pos_values.shape[0]
    pr = pos_rewards if pos_rewards is not None else pos_values.new_ones(P)
    nr = neg_rewards if neg_rewards is not None else neg_values.new_zeros(P)
    pair, metrics = pairwise_ranking_loss(pos_values, neg_values, pos_mask, neg_mask)
    mc_pos, _ = mc_value_loss(pos_values, pr, torch.ones_like(pos_mask), pos_mask)
    mc_neg, _ = mc_value_loss(neg_values, nr, torch.ones_like(neg_mask), neg_mask)
    mc = (mc_pos + mc_neg) / 2
    loss = pos_values.new_zeros(())
    if pairwise_coef:
        loss = loss + pairwise_coef * pair
    if mc_coef:
        loss = loss + mc_coef * mc
    metrics.update({"value/mc_mse": float(mc.detach()), "value/loss": float(loss.detach())})
    return loss, metrics


def stacked_pairs_loss(
    values: Tensor, mask: Tensor, targets: Tensor, *, pairwise_coef: float, mc_coef: float
) -> tuple[Tensor, Metrics]:
    """``hybrid_value_loss`` over a batch that stacks the P successes, then their P failures:
    ``values``/``mask`` ``[2P, T]``, ``targets`` ``[2P]``."""
    P = values.shape[0] // 2
    return hybrid_value_loss(
        values[:P],
        values[P:],
        mask[:P],
        mask[P:],
        pos_rewards=targets[:P],
        neg_rewards=targets[P:],
        pairwise_coef=pairwise_coef,
        mc_coef=mc_coef,
    )


def kl_penalized_rewards(
    scores: Tensor,
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    *,
    beta: float,
    kind: str = "k1",
) -> tuple[Tensor, Tensor]:
    """Per-token PPO rewards with the KL penalty folded in (seed 003, Stiennon et al. 2020).

    ``r_t = −β·KL_t`` on every policy token, plus the rollout's outcome ``score`` on its last
    policy token; observation tokens get nothing.

    Args:
        scores: ``[B]`` outcome rewards.
        logp: ``[B,T]`` log-probs of the sampled tokens under the policy that sampled them.
        ref_logp: ``[B,T]`` the same under the frozen reference.
        mask: ``[B,T]`` 1 on policy tokens.
        beta: KL coefficient (0 disables the penalty).
        kind: KL estimator, ``k1`` (``log π − log π_ref``) or ``k3``.

    Returns:
        ``(rewards[B,T], kl[B,T])``, both 0 at mask-0 positions; no gradient.
    """
    m = mask.to(logp.dtype)
    kl = kl_penalty(logp.detach(), ref_logp.detach(), kind) * m  # [B,T]
    rewards = outcome_rewards(scores.to(logp.dtype), mask) - beta * kl
    return rewards, kl


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None = 0.2,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, Metrics]:
    """PPO's critic loss: ``½·max((V − R)², (clip(V, V_old ± c) − R)²)``, or ``½·(V − R)²``
    when ``clip`` is None.

    Clipping keeps the new value within ``c`` of the value the advantages were computed with
    (Schulman et al. 2017's implementation detail, as in verl and CleanRL).

    Args:
        values: ``[B,T]`` current estimates (with grad).
        old_values: ``[B,T]`` estimates at rollout time.
        returns: ``[B,T]`` targets (GAE returns).
        mask: ``[B,T]`` 1 on policy tokens.
        clip: the clip range ``c``, or None for the plain squared error.
        loss_agg_mode: see ``ddai.trainer.losses.aggregate``.

    Returns:
        ``(loss, metrics)``: ``critic/vf_loss``, ``critic/vf_clipfrac`` (share of tokens where the
        clipped term was the larger), ``critic/vpred_mean``.
    """
    if clip is not None and clip <= 0:
        raise ValueError(f"value clip must be > 0 (or None for no clipping), got {clip}")
    R = returns.detach()
    err = (values - R) ** 2  # [B,T]
    if clip is None:
        per_tok = 0.5 * err
        frac = 0.0
    else:
        old = old_values.detach()
        clipped = old + (values - old).clamp(-clip, clip)
        err_c = (clipped - R) ** 2
        per_tok = 0.5 * torch.maximum(err, err_c)
        frac = float(masked_mean((err_c > err).to(values.dtype), mask))
    loss = aggregate(per_tok, mask, loss_agg_mode)
    return loss, {
        "critic/vf_loss": float(loss.detach()),
        "critic/vf_clipfrac": frac,
        "critic/vpred_mean": float(masked_mean(values.detach(), mask)),
    }


def pairwise_accuracy(pos_scores: Tensor, neg_scores: Tensor) -> float:
    """Share of pairs ranked right (``pos > neg``), ties counting half; NaN for no pairs."""
    if pos_scores.numel() == 0:
        return float("nan")
    d = pos_scores - neg_scores
    return float(((d > 0).double() + 0.5 * (d == 0).double()).mean())


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve of ``scores[N]`` against binary ``labels[N]``.

    The Mann-Whitney form: ``(Σ ranks of positives − n⁺(n⁺+1)/2) / (n⁺·n⁻)`` with tied scores
    given their average rank, so it equals the probability that a random positive outscores a
    random negative (ties counting half). NaN when either class is empty.
    """
    s = scores.detach().double().flatten()
    y = labels.detach().bool().flatten()
    n_pos = int(y.sum())
    n_neg = y.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = torch.unique(s, return_inverse=True, return_counts=True)
    # Average 1-based rank of each distinct score: the ranks it spans are (start, start + count].
    start = torch.cumsum(counts, 0) - counts
    avg_rank = start.double() + (counts.double() + 1) / 2  # [U]
    rank_sum = avg_rank[inverse][y].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
