"""The pointer network: masking, teacher-forced log-probabilities, equivariance, checkpoints."""

from __future__ import annotations

import pytest
from support.lazy import heavy, torch

pointer_model = heavy("ddai.trainer.pointer.model")

SCORINGS = ["bilinear", "attention"]


def _inputs(n=4, k=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randn(n, k, d, generator=g)


def _model(scoring: str):
    """A pointer network on ``_inputs``'s 8-d vectors, its weights drawn from seed 0."""
    torch.manual_seed(0)
    return pointer_model.PointerSelector(
        pointer_model.PointerConfig(d_in=8, d_model=16, scoring=scoring)
    )


@pytest.mark.parametrize("scoring", SCORINGS)
def test_log_probs_match_a_step_by_step_computation(scoring):
    model = _model(scoring)
    q, c = _inputs()
    ptr = torch.tensor([[0, 1], [5, 2], [3, 0], [2, 4]])
    got = model.step_log_probs(q, c, ptr, temperature=0.7)  # [B, 2]
    for b in range(4):
        state, keys, prior = model.encode(q[b : b + 1], c[b : b + 1])
        l1 = torch.log_softmax(model.step_logits(state, keys, prior)[0] / 0.7, -1)
        state2 = model.advance(state, keys, ptr[b : b + 1, 0])
        logits2 = model.step_logits(state2, keys, prior)[0].clone()
        logits2[ptr[b, 0]] = float("-inf")  # the first pick is masked at step 2
        l2 = torch.log_softmax(logits2 / 0.7, -1)
        assert got[b].tolist() == pytest.approx(
            [l1[ptr[b, 0]].item(), l2[ptr[b, 1]].item()], abs=1e-5
        )
    seq = model.sequence_log_prob(q, c, ptr, temperature=0.7)
    assert torch.allclose(seq, got.sum(-1))


@pytest.mark.parametrize("scoring", SCORINGS)
def test_second_step_masks_the_first_pick_and_sums_to_one(scoring):
    model = _model(scoring)
    q, c = _inputs(n=1, k=5)
    # every ordered pair's probability, summed over all 5·4 pairs, is 1
    pairs = torch.tensor([[i, j] for i in range(5) for j in range(5) if i != j])
    lp = model.sequence_log_prob(q.expand(len(pairs), -1), c.expand(len(pairs), -1, -1), pairs)
    assert lp.exp().sum().item() == pytest.approx(1.0, abs=1e-5)
    # picking the same index twice has probability 0
    same = model.sequence_log_prob(q, c, torch.tensor([[2, 2]]))
    assert same.item() == float("-inf")


@pytest.mark.parametrize("scoring", SCORINGS)
def test_candidates_are_scored_by_content_not_position(scoring):
    model = _model(scoring)
    q, c = _inputs(n=2, k=6)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    state, keys, prior = model.encode(q, c)
    state_p, keys_p, prior_p = model.encode(q, c[:, perm])
    logits = model.step_logits(state, keys, prior)
    assert torch.allclose(model.step_logits(state_p, keys_p, prior_p), logits[:, perm], atol=1e-5)


def test_checkpoint_round_trip(tmp_path):
    model = _model("attention")
    pointer_model.save_pointer(model, tmp_path / "ckpt")
    back = pointer_model.load_pointer(tmp_path / "ckpt")
    assert back.cfg == model.cfg
    q, c = _inputs()
    ptr = torch.tensor([[0, 1]] * 4)
    assert torch.equal(back.sequence_log_prob(q, c, ptr), model.sequence_log_prob(q, c, ptr))
    with pytest.raises(FileNotFoundError, match="--mode sft"):
        pointer_model.load_pointer(tmp_path / "nothing")


def test_unknown_scoring_is_refused():
    with pytest.raises(ValueError, match="bilinear, attention"):
        pointer_model.PointerConfig(d_in=8, scoring="dot")
