"""The RL math primitives every room shares: masked means and whitening, loss aggregation, KL
estimators, dense group indices and chunked token log-probs. A leaf: it imports torch only, so ``losses``, ``advantages``,
``value.losses``, ``ppo.terms`` and ``pointer.losses`` build on it without importing each other.

Shapes: ``B`` rollouts, ``T`` response positions; ``mask[B,T]`` is 1 on policy tokens and 0 on
observation tokens and padding (state masking).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "AGG_MODES",
    "KL_ESTIMATORS",
    "aggregate",
    "group_index",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalty",
    "lookup",
    "masked_mean",
    "masked_whiten",
    "selected_logprobs",
]


def lookup(table: dict[str, Any], name: str, what: str) -> Any:
    """``table[name]``, or a ValueError naming ``what`` and the known names (sorted)."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}") from None


# ---------------------------------------------------------------------------- masked statistics


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over mask-1 entries (0 when there are none)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def masked_whiten(x: Tensor, mask: Tensor, *, eps: float = 1e-8) -> Tensor:
    """Whiten ``x[B,T]`` with the mean and unbiased variance of its mask-1 entries (verl's
    ``masked_whiten``); mask-0 entries are whitened too but did not enter the statistics."""
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n
    var = ((x - mean) ** 2 * m).sum() / (n - 1).clamp(min=1)
    return (x - mean) * torch.rsqrt(var + eps)


def group_index(group_ids: Sequence[Any] | Tensor) -> Tensor:
    """Dense group index ``[N]`` (0…G-1) for any hashable group ids: first-seen order for a
    sequence, sorted-id order for a tensor (``torch.unique``)."""
    if isinstance(group_ids, Tensor):
        _, inverse = torch.unique(group_ids, return_inverse=True)
        return inverse
    seen: dict[Any, int] = {}
    return torch.tensor([seen.setdefault(g, len(seen)) for g in group_ids], dtype=torch.long)


# ---------------------------------------------------------------------------- aggregation


def _seq_mean_token_mean(loss: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(loss.dtype)
    per_seq = (loss * m).sum(-1) / m.sum(-1).clamp(min=1)  # [B]
    return per_seq.mean()


def _seq_mean_token_sum(loss: Tensor, mask: Tensor) -> Tensor:
    return (loss * mask.to(loss.dtype)).sum(-1).mean()


AGG_MODES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "token-mean": masked_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
}


def aggregate(loss: Tensor, mask: Tensor, mode: str = "token-mean") -> Tensor:
    """Reduce a per-token loss ``[B,T]`` (or per-sequence ``[B,1]``, broadcast) to a scalar.

    - ``token-mean``: Σ loss·mask / Σ mask (every policy token weighs the same).
    - ``seq-mean-token-mean``: mean over sequences of each one's token mean; a row with no policy
      token contributes 0 and still counts in the mean (TRL's ``loss_type="grpo"``).
    - ``seq-mean-token-sum``: mean over sequences of each one's token sum.
    """
    fn = lookup(AGG_MODES, mode, "loss aggregation mode")
    return fn(loss.expand(mask.shape), mask)


# ---------------------------------------------------------------------------- KL estimators
# Schulman, "Approximating KL divergence" (2020): estimators of KL(π_θ ‖ π_ref) from samples of π_θ.


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = log π_θ − log π_ref: unbiased, high variance, can be negative. ``[B,T]``."""
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = ½·(log π_θ − log π_ref)²: biased, low variance, ≥ 0; as a loss its gradient is that of
    KL(π_θ ‖ π_ref). ``[B,T]``."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1: unbiased, low variance, ≥ 0
    (TRL's GRPO KL term and verl's ``low_var_kl`` without its clamps). ``[B,T]``."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL estimate by name (``k1``, ``k2`` or ``k3``)."""
    return lookup(KL_ESTIMATORS, kind, "KL estimator")(logp, ref_logp)


# ---------------------------------------------------------------------------- token log-probs


def selected_logprobs(
    logits: Tensor, ids: Tensor, temperature: float = 1.0, *, chunk: int = 1024
) -> Tensor:
    """``log softmax(logits / temperature)`` at ``ids``: ``logits[B,T,V]`` (any dtype),
    ``ids[B,T]`` → ``[B,T]`` float32.

    Computed ``chunk`` positions at a time, so the float32 copy of the vocabulary-wide logits
    never exceeds ``[chunk, V]`` (the logits themselves stay in the model's dtype); the result is
    the one-shot ``log_softmax(logits.float() / t).gather(ids)`` (each row's logsumexp is the
    same reduction either way)."""
    B, T, V = logits.shape
    flat, flat_ids = logits.reshape(B * T, V), ids.reshape(B * T, 1)
    parts = []
    for start in range(0, B * T, chunk):
        part = flat[start : start + chunk].float() / temperature  # [chunk,V]
        picked = part.gather(-1, flat_ids[start : start + chunk]).squeeze(-1)
        parts.append(picked - torch.logsumexp(part, dim=-1))
    if not parts:
        return logits.new_zeros((B, T), dtype=torch.float32)
    return torch.cat(parts).reshape(B, T)
