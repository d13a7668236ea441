"""Decoding pointer sequences, vectorized over all queries at once: greedy, beam search,
temperature sampling and uniform random pairs.

Inputs are ``query_emb [N, d]`` and ``cand_emb [N, K, d]``; pointers come back as int64
``[N, n, 2]`` (``n`` per query) with log-probabilities ``[N, n]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ddai.trainer.pointer.model import PointerSelector


def _second_logits(
    model: PointerSelector, state: Tensor, keys: Tensor, prior: Tensor, first: Tensor
) -> Tensor:
    """Step-2 logits ``[R, K]`` after the picks ``first [R]``, which are masked out."""
    picked = torch.zeros(keys.shape[:2], dtype=torch.bool).scatter(1, first[:, None], True)
    return model.step_logits(model.advance(state, keys, first), keys, prior, picked)


def _repeat(n: int, *xs: Tensor) -> tuple[Tensor, ...]:
    """Each of ``xs`` with every row repeated ``n`` times in place (``[N, ...]`` → ``[N*n, ...]``)."""
    return tuple(x.repeat_interleave(n, dim=0) for x in xs)


@torch.no_grad()
def greedy(model: PointerSelector, query_emb: Tensor, cand_emb: Tensor) -> Tensor:
    """The argmax pick at each step ``[N, 2]``."""
    state, keys, prior = model.encode(query_emb, cand_emb)
    first = model.step_logits(state, keys, prior).argmax(-1)
    second = _second_logits(model, state, keys, prior, first).argmax(-1)
    return torch.stack([first, second], dim=1)


@torch.no_grad()
def beam_search(
    model: PointerSelector, query_emb: Tensor, cand_emb: Tensor, num_beams: int
) -> tuple[Tensor, Tensor]:
    """The ``num_beams`` best sequences by log-probability: ``(pointers [N, b, 2], logp [N, b])``.

    Step 1 keeps the top-b first picks; step 2 extends each by every unpicked candidate and keeps
    the top-b of the ``b·K`` extensions, best first (ties: lower beam, then lower index).
    """
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    state, keys, prior = model.encode(query_emb, cand_emb)
    n, k = keys.shape[:2]
    b = min(num_beams, k)
    logp1 = torch.log_softmax(model.step_logits(state, keys, prior), dim=-1)  # [N, K]
    lp1, first = logp1.topk(b, dim=-1)  # [N, b]
    state_b, keys_b, prior_b = _repeat(b, state, keys, prior)  # keys_b [N*b, K, h]
    logits2 = _second_logits(model, state_b, keys_b, prior_b, first.reshape(-1))
    total = lp1[..., None] + torch.log_softmax(logits2, dim=-1).reshape(n, b, k)  # [N, b, K]
    width = min(b, b * (k - 1))
    scores, flat = total.reshape(n, b * k).topk(width, dim=-1)  # [N, width]
    beam, second = flat // k, flat % k
    pointers = torch.stack([first.gather(1, beam), second], dim=-1)
    return pointers, scores


@torch.no_grad()
def sample(
    model: PointerSelector,
    query_emb: Tensor,
    cand_emb: Tensor,
    *,
    temperature: float,
    n: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """``n`` draws per query from softmax(logits / temperature) at both steps.

    Returns ``(pointers [N, n, 2], logp [N, n])`` with ``logp`` the log-probability under the
    tempered distribution that drew them.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    state, keys, prior = model.encode(query_emb, cand_emb)
    m = keys.shape[0]
    state, keys, prior = _repeat(n, state, keys, prior)  # keys [N*n, K, h]
    logp1 = torch.log_softmax(model.step_logits(state, keys, prior) / temperature, dim=-1)
    first = torch.multinomial(logp1.exp(), 1, generator=generator).squeeze(1)  # [N*n]
    logp2 = torch.log_softmax(_second_logits(model, state, keys, prior, first) / temperature, -1)
    second = torch.multinomial(logp2.exp(), 1, generator=generator).squeeze(1)
    rows = torch.arange(m * n)
    logp = logp1[rows, first] + logp2[rows, second]
    return torch.stack([first, second], dim=-1).reshape(m, n, 2), logp.reshape(m, n)


def random_pairs(
    n_queries: int, k: int, n: int, *, generator: torch.Generator | None = None
) -> Tensor:
    """``n`` uniform ordered pairs of distinct indices per query ``[N, n, 2]``."""
    if k < 2:
        raise ValueError(f"need at least 2 candidates for a pair, got K={k}")
    first = torch.randint(k, (n_queries, n), generator=generator)
    second = torch.randint(k - 1, (n_queries, n), generator=generator)
    second = second + (second >= first).long()  # skip the first pick: uniform over the others
    return torch.stack([first, second], dim=-1)


def random_pair_logprob(k: int) -> float:
    """log-probability of one ordered pair under ``random_pairs``: −log(K(K−1))."""
    return -math.log(k * (k - 1))
