"""Vectorized decoding against brute force: beams, samples, greedy, random pairs."""

from __future__ import annotations

import itertools
import math

import pytest
from support.lazy import heavy, torch

decode = heavy("ddai.trainer.pointer.decode")
pointer_model = heavy("ddai.trainer.pointer.model")

K = 6


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = pointer_model.PointerSelector(pointer_model.PointerConfig(d_in=8, d_model=16)).eval()
    g = torch.Generator().manual_seed(1)
    q, c = torch.randn(5, 8, generator=g) * 3, torch.randn(5, K, 8, generator=g) * 3
    pairs = torch.tensor(list(itertools.permutations(range(K), 2)))  # [K(K-1), 2]
    with torch.no_grad():
        table = torch.stack(
            [
                model.sequence_log_prob(
                    q[i : i + 1].expand(len(pairs), -1),
                    c[i : i + 1].expand(len(pairs), -1, -1),
                    pairs,
                )
                for i in range(5)
            ]
        )  # [N, K(K-1)] log π of every ordered pair
    return model, q, c, pairs, table


def test_full_width_beam_search_is_the_exact_top_b(setup):
    model, q, c, pairs, table = setup
    ptr, score = decode.beam_search(model, q, c, num_beams=K)
    best, idx = table.topk(K, dim=-1)
    assert torch.allclose(score, best, atol=1e-5)
    assert torch.equal(ptr, pairs[idx])


def test_narrow_beam_extends_the_top_first_picks(setup):
    model, q, c, pairs, table = setup
    ptr, score = decode.beam_search(model, q, c, num_beams=2)
    with torch.no_grad():
        state, keys, prior = model.encode(q, c)
        first_top = torch.log_softmax(model.step_logits(state, keys, prior), -1).topk(2).indices
    for i in range(5):
        allowed = [j for j, p in enumerate(pairs.tolist()) if p[0] in first_top[i].tolist()]
        best = table[i, allowed].topk(2)
        assert score[i].tolist() == pytest.approx(best.values.tolist(), abs=1e-5)
        # beam scores are the model's own sequence log-probabilities
        assert score[i].tolist() == pytest.approx(
            table[i, [pairs.tolist().index(p) for p in ptr[i].tolist()]].tolist(), abs=1e-5
        )


def test_greedy_is_stepwise_argmax(setup):
    model, q, c, _, _ = setup
    g = decode.greedy(model, q, c)
    assert torch.equal(g, decode.beam_search(model, q, c, num_beams=1)[0][:, 0])
    assert (g[:, 0] != g[:, 1]).all()


def test_sampling_follows_the_tempered_policy(setup):
    model, q, c, _, _ = setup
    tau = 1.3
    gen = torch.Generator().manual_seed(0)
    ptr, lp = decode.sample(model, q[:1], c[:1], temperature=tau, n=4000, generator=gen)
    assert (ptr[..., 0] != ptr[..., 1]).all()
    # the returned log-probabilities are those of the tempered policy
    with torch.no_grad():
        ref = model.sequence_log_prob(
            q[:1].expand(4000, -1), c[:1].expand(4000, -1, -1), ptr[0], temperature=tau
        )
    assert torch.allclose(lp[0], ref, atol=1e-5)
    # empirical first-pick frequencies match the tempered first-step distribution
    with torch.no_grad():
        state, keys, prior = model.encode(q[:1], c[:1])
        p1 = torch.softmax(model.step_logits(state, keys, prior)[0] / tau, -1)
    freq = torch.bincount(ptr[0, :, 0], minlength=K).float() / 4000
    # binomial standard error at n=4000 is at most 0.008; 4.5 of them
    assert (freq - p1).abs().max().item() < 0.036


def test_random_pairs_are_distinct_and_cover_all_pairs():
    gen = torch.Generator().manual_seed(0)
    ptr = decode.random_pairs(3, K, 3000, generator=gen)
    assert ptr.shape == (3, 3000, 2) and (ptr[..., 0] != ptr[..., 1]).all()
    counts = torch.bincount((ptr[..., 0] * K + ptr[..., 1]).reshape(-1), minlength=K * K).float()
    seen = counts[counts > 0]
    assert seen.numel() == K * (K - 1)  # every ordered pair, no diagonal
    # uniform: 9000 / 30 = 300 each; 5 standard errors of a count ≈ 5·sqrt(300) ≈ 87
    assert (seen - 300).abs().max().item() < 87
    assert decode.random_pair_logprob(K) == pytest.approx(-math.log(30))
