"""Pointer-selector math (seed 002 §3.4, §4.3, §4.4): reward shaping, group normalization,
advantages and losses. Pure tensor functions with scalar arguments, no IO.

Shapes: ``B`` pointer sequences (rows), each belonging to the group (query) ``group_ids[B]``;
``logp[B]`` is the current policy's log π(pointer), the sum over the two picks. Every loss returns
``(loss, metrics)`` with namespaced, detached metric values. The variants a config names are
looked up by name (``get_advantage``, ``NORMALIZERS``); an unknown name fails with the known ones.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ddai.pipelines.pointer import one_of
from ddai.trainer import rlmath
from ddai.trainer.pointer import config
from ddai.trainer.pointer.config import CORRECTNESS_MODES

Metrics = dict[str, float]


# ---------------------------------------------------------------- groups


def group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Contiguous group numbers ``[B]`` (0..G-1, ``rlmath.group_index``) and G."""
    inv = rlmath.group_index(group_ids)
    return inv, int(inv.max()) + 1 if inv.numel() else 0


def _group_reduce(x: Tensor, inv: Tensor, g: int, op: str) -> Tensor:
    """Per-group ``sum``/``amax``/``amin`` of ``x [B]`` → ``[G]``."""
    init = {"sum": 0.0, "amax": float("-inf"), "amin": float("inf")}[op]
    out = torch.full((g,), init, dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, inv, x, reduce=op, include_self=op == "sum")


def group_mean(x: Tensor, group_ids: Tensor) -> Tensor:
    """Each row's group mean ``[B]``."""
    inv, g = group_index(group_ids)
    count = _group_reduce(torch.ones_like(x), inv, g, "sum")
    return (_group_reduce(x, inv, g, "sum") / count)[inv]


def _zscore(x: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """(x − mean_g) / (std_g + eps), unbiased std; 0 in one-row or constant groups."""
    inv, g = group_index(group_ids)
    count = _group_reduce(torch.ones_like(x), inv, g, "sum")
    mean = _group_reduce(x, inv, g, "sum") / count
    centered = x - mean[inv]
    var = _group_reduce(centered**2, inv, g, "sum") / (count - 1).clamp(min=1)
    return centered / (var.sqrt()[inv] + eps)


def _minmax(x: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """(x − min_g) / (max_g − min_g + eps) in [0, 1]; 0 in constant groups."""
    inv, g = group_index(group_ids)
    lo, hi = _group_reduce(x, inv, g, "amin")[inv], _group_reduce(x, inv, g, "amax")[inv]
    return (x - lo) / (hi - lo + eps)


def _identity(x: Tensor, group_ids: Tensor) -> Tensor:
    return x


NORMALIZERS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "zscore": _zscore,
    "minmax": _minmax,
    "none": _identity,
}
assert tuple(NORMALIZERS) == config.NORMALIZERS  # the names the config accepts, one each


def group_normalize(rewards: Tensor, group_ids: Tensor, method: str = "zscore") -> Tensor:
    """Normalize ``rewards [B]`` within each group: ``zscore``, ``minmax`` or ``none``."""
    return NORMALIZERS[one_of(method, NORMALIZERS, "reward normalization")](rewards, group_ids)


# ---------------------------------------------------------------- rewards


def shape_rewards(
    correct: Tensor,
    acc_score: Tensor,
    beam_score: Tensor,
    logprob: Tensor,
    *,
    alpha: float = 0.2,
    beta: float = 1.0,
    correctness_mode: str = "pm1",
    quality: str = "none",
    use_acc_score: bool = False,
    clip: float = 5.0,
) -> Tensor:
    """Seed 002 §3.4: ``clip(alpha · quality + beta · correctness, −clip, clip)``, all ``[B]``.

    correctness: ``01`` → c, ``pm1`` → 2c − 1, with c = ``vqa_correct`` (or ``vqa_acc_score``
    with ``use_acc_score``). quality: ``beam`` → ``beam_score``, ``logprob`` → ``logprob_score``
    (higher is better, as the seed's comment says; its snippet negates it, which would reward the
    model's least likely picks), ``none`` → 0; a missing (NaN) quality counts 0, as in the seed.
    """
    one_of(correctness_mode, CORRECTNESS_MODES, "correctness mode")
    sources = {"none": torch.zeros_like(correct), "beam": beam_score, "logprob": logprob}
    source = sources[one_of(quality, sources, "quality source")]
    c = (acc_score if use_acc_score else correct).to(torch.float64)
    c = c if correctness_mode == "01" else 2.0 * c - 1.0
    q = torch.nan_to_num(source.to(torch.float64), nan=0.0)
    return (alpha * q + beta * c).clamp(-clip, clip)


# ---------------------------------------------------------------- advantages


def clipped_group_advantages(
    rewards: Tensor, group_ids: Tensor, *, norm: str = "zscore", clip: float = 5.0
) -> Tensor:
    """The pointer's group-relative advantage ``[B]`` (seed 002 §4.4.1, which calls it GRPO;
    registered as ``clipped-group``, not the Searcher's z-score ``ddai.trainer.grpo.advantage``):
    normalize within the query, subtract the group mean of the normalized rewards (the baseline),
    clip to ``[−clip, clip]``."""
    n = group_normalize(rewards, group_ids, norm)
    return (n - group_mean(n, group_ids)).clamp(-clip, clip)


def reinforcepp_advantages(
    rewards: Tensor, group_ids: Tensor, *, norm: str = "none", clip: float = 5.0, eps: float = 1e-6
) -> Tensor:
    """REINFORCE++ with a group baseline, one step per query (the per-token estimator is
    ``ddai.trainer.advantages.reinforcepp_advantages``): ``r − mean_g(r)`` (after the optional
    per-group normalization), then whitened over the whole batch, clipped to ``[−clip, clip]``."""
    n = group_normalize(rewards, group_ids, norm)
    a = n - group_mean(n, group_ids)
    std = a.std() if a.numel() > 1 else torch.zeros((), dtype=a.dtype)
    return ((a - a.mean()) / (std + eps)).clamp(-clip, clip)


ADVANTAGES: dict[str, Callable[..., Tensor]] = {
    config.CLIPPED_GROUP: clipped_group_advantages,
    "reinforcepp": reinforcepp_advantages,
}


def get_advantage(name: str) -> Callable[..., Tensor]:
    return ADVANTAGES[one_of(name, ADVANTAGES, "advantage estimator")]


# ---------------------------------------------------------------- losses


def sft_loss(logp: Tensor) -> tuple[Tensor, Metrics]:
    """Cross-entropy on labeled pointers: −mean log π(label)."""
    loss = -logp.mean()
    return loss, {"sft/nll": float(loss.detach())}


def rce_temperature(step: int, total_steps: int, *, start: float = 2.0, end: float = 0.5) -> float:
    """Linear schedule from ``start`` at step 0 to ``end`` at the last step (seed: 2.0 → 0.5)."""
    if total_steps <= 1:
        return start
    frac = min(max(step, 0), total_steps - 1) / (total_steps - 1)
    return start + (end - start) * frac


def group_softmax(scores: Tensor, group_ids: Tensor) -> Tensor:
    """softmax of ``scores [B]`` within each group ``[B]`` (each group sums to 1)."""
    inv, g = group_index(group_ids)
    z = scores - _group_reduce(scores, inv, g, "amax")[inv]
    e = z.exp()
    return e / _group_reduce(e, inv, g, "sum")[inv]


def rce_loss(
    logp: Tensor, rewards: Tensor, group_ids: Tensor, *, temperature: float
) -> tuple[Tensor, Metrics]:
    """Reward-weighted cross-entropy (seed 002 §4.3).

    Within each group, w = softmax(rewards / temperature); loss = −(1/G) Σ_g Σ_{i∈g} w_i·logp_i.
    A high temperature spreads the weight over the group; a low one concentrates it on the best.
    The seed gives no formula, only that low rewards are "suppressed, or even negative": these
    weights press them towards 0 and are never negative, so RCE never pushes a pair down.
    """
    if temperature <= 0:
        raise ValueError(f"RCE temperature must be > 0, got {temperature}")
    w = group_softmax(rewards.to(logp.dtype) / temperature, group_ids).detach()
    _, g = group_index(group_ids)
    loss = -(w * logp).sum() / g
    entropy = -(w * w.clamp(min=1e-12).log()).sum() / g
    return loss, {
        "rce/loss": float(loss.detach()),
        "rce/temperature": float(temperature),
        "rce/weight_entropy": float(entropy),
    }


def _ratio_loss(
    prefix: str, logp: Tensor, old_logp: Tensor, adv: Tensor, clip_eps: float, kl_coef: float
) -> tuple[Tensor, Metrics]:
    """The clipped ratio objective with its KL term; metrics under ``prefix/``."""
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    surr1 = ratio * adv
    surr2 = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv
    policy = -torch.min(surr1, surr2).mean()
    kl = (ratio - 1.0 - log_ratio).mean()  # k3 estimator of KL(π_old ‖ π), ≥ 0
    loss = policy + kl_coef * kl
    clipped = ((ratio - 1.0).abs() > clip_eps).to(logp.dtype).mean()
    return loss, {
        f"{prefix}/policy_loss": float(policy.detach()),
        f"{prefix}/kl": float(kl.detach()),
        f"{prefix}/ratio_mean": float(ratio.detach().mean()),
        f"{prefix}/clip_frac": float(clipped.detach()),
    }


def clipped_group_loss(
    logp: Tensor, old_logp: Tensor, adv: Tensor, *, clip_eps: float = 0.2, kl_coef: float = 0.0
) -> tuple[Tensor, Metrics]:
    """PPO-clip on pointer sequences (seed 002 §4.4.2, its "GRPO"), all ``[B]``; metrics under
    ``clipped_group/``, the phase's name in a metric key's spelling.

    ratio = exp(logp − old_logp); loss = −mean(min(ratio·A, clip(ratio, 1±eps)·A))
    + kl_coef · mean(ratio − 1 − log ratio).
    """
    return _ratio_loss("clipped_group", logp, old_logp, adv, clip_eps, kl_coef)


def reinforcepp_loss(
    logp: Tensor,
    adv: Tensor,
    *,
    old_logp: Tensor | None = None,
    clip_eps: float | None = None,
    kl_coef: float = 0.0,
) -> tuple[Tensor, Metrics]:
    """REINFORCE++ (seed 002 §4.4.3): −mean(A · logp); with ``old_logp`` and ``clip_eps`` the
    "light PPO" form, the clipped ratio objective of ``clipped_group_loss`` (and its KL term)."""
    if old_logp is None or clip_eps is None:
        loss = -(adv * logp).mean()
        return loss, {"reinforcepp/policy_loss": float(loss.detach())}
    return _ratio_loss("reinforcepp", logp, old_logp, adv, clip_eps, kl_coef)
