"""The sampler is the policy: with a non-trivial sampling config (repetition penalty, temperature,
top-k, top-p) the returned log-probs equal a teacher-forced recomputation under the same
processors; the checkpoint's own ``generation_config`` never applies; suppressed tokens are never
sampled; and only ``[N, n]`` log-probs are kept, not ``[N, n, V]`` logits."""

from __future__ import annotations

import pytest
from support.lazy import torch
from support.sampling_reference import recompute_logprobs

from ddai.trainer.episode.rollout import HFSampler
from ddai.trainer.episode.sampling import LogprobRecorder, SamplingConfig
from ddai.trainer.modeling import load_policy
from ddai.trainer.tiny import build_tiny


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny(tmp_path_factory.mktemp("tiny") / "m")
    model, tok = load_policy(str(path))
    return model.eval(), tok


def _contexts(tok):
    texts = ["<think>revenue chart</think>", "The quick brown fox", "2019 2020 2021 2021 2021"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def _check(model, contexts, outs, config):
    for ctx, (ids, lps) in zip(contexts, outs, strict=True):
        assert len(ids) == len(lps) > 0
        ref = recompute_logprobs(model, ctx, ids, config)
        torch.testing.assert_close(torch.tensor(lps), ref, atol=1e-5, rtol=0)


def test_logprobs_match_recomputation_under_the_same_processors(policy):
    model, tok = policy
    config = SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.3)
    sampler = HFSampler(
        model, tok, temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.3, stop_ids=[-1]
    )
    contexts = _contexts(tok)  # different lengths: left padding must not count as repetition
    torch.manual_seed(0)
    outs = sampler.sample(contexts, [24, 24, 24])
    assert [len(ids) for ids, _ in outs] == [24, 24, 24]
    _check(model, contexts, outs, config)
    # Top-k / top-p: every drawn token was inside the kept set (finite log-prob), and the
    # processed distribution is not the raw one: raw log-probs differ.
    raw = recompute_logprobs(model, contexts[0], outs[0][0], SamplingConfig())
    assert torch.isfinite(torch.tensor(outs[0][1])).all()
    assert (raw - torch.tensor(outs[0][1])).abs().max() > 1e-3


def test_the_checkpoints_generation_config_is_not_applied(policy):
    model, tok = policy
    # A shipped generation_config (Qwen2.5 ships repetition_penalty 1.05, top_k 20, top_p 0.8).
    saved = model.generation_config
    model.generation_config = type(saved)(repetition_penalty=2.0, top_k=3, top_p=0.5)
    try:
        sampler = HFSampler(model, tok, temperature=1.0, stop_ids=[-1])
        contexts = _contexts(tok)
        torch.manual_seed(1)
        outs = sampler.sample(contexts, [16, 16, 16])
        _check(model, contexts, outs, SamplingConfig())
        assert model.generation_config.repetition_penalty == 2.0  # restored
    finally:
        model.generation_config = saved


def test_suppressed_token_is_never_sampled(policy):
    model, tok = policy
    contexts = _contexts(tok)
    torch.manual_seed(2)
    free = HFSampler(model, tok, temperature=0, stop_ids=[-1]).sample(contexts, [12, 12, 12])
    banned = free[0][0][0]  # greedy's first choice for the first context
    sampler = HFSampler(model, tok, temperature=0, stop_ids=[-1], image_token_id=banned)
    outs = sampler.sample(contexts, [12, 12, 12])
    assert all(banned not in ids for ids, _ in outs)
    _check(model, contexts, outs, SamplingConfig(temperature=0, suppress_ids=(banned,)))


def test_recorder_keeps_one_vocabulary_row_per_sequence():
    # Three steps of a 2-row batch over a 5-token vocabulary.
    rec = LogprobRecorder()
    steps = [torch.randn(2, 5) for _ in range(3)]
    drawn = torch.tensor([[1, 4, 0], [3, 3, 2]])
    ids = torch.zeros(2, 2, dtype=torch.long)
    for k, scores in enumerate(steps):
        rec(ids, scores)
        assert len(rec.columns) == k and rec.kept.shape == (2, 5)  # only the latest step kept
        ids = torch.cat([ids, drawn[:, k : k + 1]], 1)
    got = rec.finish(drawn)
    want = torch.stack(
        [
            torch.log_softmax(s, -1).gather(-1, drawn[:, k : k + 1])[:, 0]
            for k, s in enumerate(steps)
        ],
        1,
    )
    torch.testing.assert_close(got, want)
    assert rec.kept is None


def test_sampler_leaves_training_mode_as_it_was(policy):
    model, tok = policy
    model.train()
    try:
        HFSampler(model, tok, stop_ids=[-1]).sample(_contexts(tok)[:1], [2])
        assert model.training
    finally:
        model.eval()
