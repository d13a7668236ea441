"""KV cache reuse across turns: the same tokens and log-probs as re-encoding every turn (greedy,
and sampled under non-trivial processors, same seed), fewer tokens through the model, the cache
laid out as ``generate``'s left-padded batch, and a fallback said once where the model does not
allow reuse."""

from __future__ import annotations

import logging

import pytest
from support.lazy import torch

from ddai.pipelines.pages.corpus import Corpus
from ddai.trainer.episode import kv_reuse
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.kv_reuse import TurnCache, _gather, _Row
from ddai.trainer.episode.rollout import HFSampler, RolloutConfig, run_rollouts, token_truncator
from ddai.trainer.episode.tasks import Task
from ddai.trainer.modeling import load_policy
from ddai.trainer.tiny import build_tiny

SAMPLED = {"temperature": 0.7, "top_k": 20, "top_p": 0.9, "repetition_penalty": 1.3}
MODES = {"greedy": {"temperature": 0}, "sampled": SAMPLED}


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    model, tok = load_policy(str(build_tiny(tmp_path_factory.mktemp("tiny") / "m")))
    return model.eval(), tok


class Counter:
    """Tokens run through the model: ``input_ids`` of every forward call (prefill, decode steps,
    the observation pass)."""

    def __init__(self, model):
        self.tokens = 0
        self.handle = model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.tokens += ids.numel()

    def close(self):
        self.handle.remove()


def _turns(model, tok, *, reuse, mode, stops):
    """Four turns over four contexts of different lengths; each turn's tokens and an
    observation of a different length per row are appended; row 1 ends after turn 2."""
    sampler = HFSampler(model, tok, stop_ids=stops, kv_reuse=reuse, **MODES[mode])
    texts = ["<think>revenue chart</think>", "The quick brown fox", "2019 2020 2021 2021", "a"]
    contexts = [tok.encode(t, add_special_tokens=False) for t in texts]
    live, outs = [0, 1, 2, 3], []
    counter = Counter(model.get_base_model() if hasattr(model, "get_base_model") else model)
    torch.manual_seed(0)
    try:
        for turn in range(4):
            caps = [10, 7, 12, 9][: len(live)]
            got = sampler.sample([contexts[i] for i in live], caps)
            outs.append(got)
            for i, (ids, _) in zip(live, got, strict=True):
                obs = tok.encode(f" page {turn}.{i}" * (i + 1), add_special_tokens=False)
                contexts[i] = contexts[i] + ids + obs
            if turn == 1:
                live = [0, 2, 3]
    finally:
        counter.close()
    return outs, counter.tokens, sampler.turns


@pytest.mark.parametrize("mode", sorted(MODES))
def test_turns_with_cache_reuse_equal_re_encoding(policy, mode):
    model, tok = policy
    # Stop tokens the policy draws early in some rows: rows end at different steps, leaving
    # junk columns in the cache that the next turn must skip.
    first, _, _ = _turns(model, tok, reuse=False, mode=mode, stops=[-1])
    stops = [*sorted({ids[2] for ids, _ in first[0]})[:2], tok.eos_token_id]
    plain, plain_tokens, _ = _turns(model, tok, reuse=False, mode=mode, stops=stops)
    reused, reused_tokens, turns = _turns(model, tok, reuse=True, mode=mode, stops=stops)
    lengths = {len(ids) for turn in plain for ids, _ in turn}
    assert min(lengths) < 7 and max(lengths) == 12  # some rows stopped early, some ran out
    for a, b in zip(plain, reused, strict=True):
        for (ids_a, lps_a), (ids_b, lps_b) in zip(a, b, strict=True):
            assert ids_a == ids_b
            torch.testing.assert_close(torch.tensor(lps_b), torch.tensor(lps_a), atol=1e-5, rtol=0)
    assert turns.reused_tokens > turns.encoded_tokens  # turns 2-4 came mostly from the cache
    assert reused_tokens < 0.7 * plain_tokens


@pytest.fixture
def world():
    lines = [{"text": "Revenue 2021 30", "bbox": [0, 0, 800, 90]}]
    corpus = Corpus.from_records(
        [{"doc_id": "1", "page": p, "lines": lines, "width": 800, "height": 600} for p in (1, 2)]
    )
    task = Task(
        uid="train_1",
        messages=({"role": "user", "content": "What was the revenue in 2021?"},),
        question="What was the revenue in 2021?",
        reference_answer="30",
        reference_pages=("1_1",),
    )
    return corpus, task


class TopSearch:
    name = "top"

    def search(self, query, k=5, doc=None):
        return [("1_1", 1.0), ("1_2", 0.5)]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_rollouts_with_cache_reuse_equal_re_encoding(policy, world, mode):
    model, tok = policy
    corpus, task = world
    env = SearchEnv(TopSearch(), corpus, EnvConfig(max_turns=4), truncate=token_truncator(tok, 6))
    config = RolloutConfig(max_turn_tokens=10, max_completion_tokens=120, obs_max_tokens=6)
    slots = [(task, 0, 0), (task, 0, 1), (task, 1, 0)]
    runs = {}
    for reuse in (False, True):
        sampler = HFSampler(model, tok, kv_reuse=reuse, **MODES[mode])
        counter = Counter(model)
        torch.manual_seed(3)
        try:
            trajs = run_rollouts(slots, sampler=sampler, tokenizer=tok, env=env, config=config)
        finally:
            counter.close()
        runs[reuse] = (trajs, counter.tokens, sampler.turns)
    (plain, plain_tokens, _), (reused, reused_tokens, turns) = runs[False], runs[True]
    assert all(len(t.episode.turns) > 1 for t in plain)  # several turns with observations between
    for a, b in zip(plain, reused, strict=True):
        assert a.completion_ids == b.completion_ids and a.env_mask == b.env_mask
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=0
        )
    assert turns.reused_tokens > 0 and reused_tokens < plain_tokens
    assert turns.cache is None  # released: nothing held through the training pass


def test_gather_right_aligns_each_rows_range():
    from transformers import DynamicCache

    # One layer, batch 2, 1 head, 5 columns, head dim 1: column c of row b holds 10·b + c.
    keys = (torch.arange(2)[:, None] * 10 + torch.arange(5)[None, :]).float()[:, None, :, None]
    cache = DynamicCache([(keys, -keys)])
    # New row 0 takes row 1's columns 1..3, new row 1 row 0's columns 3..4, new row 2 row 1's
    # column 4, right-aligned into width 4.
    out = _gather(cache, torch.tensor([1, 0, 1]), starts=[1, 3, 4], lengths=[3, 2, 1], width=4)
    got = out.layers[0].keys[:, 0, :, 0]
    assert got.tolist() == [[0, 11, 12, 13], [0, 0, 3, 4], [0, 0, 0, 14]]
    assert torch.equal(out.layers[0].values, -got[:, None, :, None])


def test_gather_zeroes_masked_columns_even_when_the_source_is_nan():
    from transformers import DynamicCache

    keys = torch.tensor([float("nan"), 1.0, 2.0])[None, None, :, None]
    out = _gather(DynamicCache([(keys, keys)]), torch.tensor([0]), [1], [2], width=4)
    assert out.layers[0].keys[0, 0, :, 0].tolist() == [0.0, 0.0, 1.0, 2.0]


def test_a_context_is_matched_only_by_a_cached_prefix():
    turns = TurnCache()
    turns.rows = [_Row(0, 2, [5, 6, 7]), _Row(1, 0, [5, 6, 8, 9])]
    got = turns._match([[5, 6, 8, 9, 1], [5, 6, 7, 3]])  # out of order: still found
    assert [r.row for r in got] == [1, 0]
    assert turns._match([[5, 6, 7], [5, 6, 9]]) is None  # no row is a prefix of the second


def test_fallbacks_are_said_once(caplog, monkeypatch):
    from transformers import DynamicCache

    monkeypatch.setattr(kv_reuse, "_SAID", set())
    turns = TurnCache()
    kv = torch.zeros(1, 1, 2, 1)
    sliding = DynamicCache([(kv, kv, torch.tensor(4))])  # a sliding-window layer
    with caplog.at_level(logging.WARNING, logger="ddai.trainer"):
        assert turns.usable(vision=False)
        for _ in range(2):
            turns.store(sliding, [[1, 2]], [[3]], width=2, steps=1)
        assert not turns.enabled and turns.cache is None and not turns.usable(vision=False)
    with caplog.at_level(logging.WARNING, logger="ddai.trainer"):
        for _ in range(2):  # one sampler per rollout batch: still said once
            assert not TurnCache().usable(vision=True)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert "DynamicSlidingWindowLayer" in said[0] and "vision-language" in said[1]


def test_a_context_with_nothing_new_reuses_all_but_its_last_token(policy):
    model, tok = policy
    contexts = [tok.encode(t, add_special_tokens=False) for t in ("Revenue 2021", "The fox")]
    free = HFSampler(model, tok, temperature=0, stop_ids=[-1]).sample(contexts, [5, 5])
    stop = free[0][0][0]  # row 0 stops at its first token, row 1 runs its budget
    assert stop not in free[1][0]
    outs = {}
    for reuse in (False, True):
        sampler = HFSampler(model, tok, temperature=0, stop_ids=[stop], kv_reuse=reuse)
        first = sampler.sample(contexts, [5, 5])
        assert [len(ids) for ids, _ in first] == [1, 5]
        # Next turn: the contexts with their sampled tokens and no observation. Row 0's context
        # is all in the cache (its one token was forwarded while row 1 decoded on): all but its
        # last token are reused. Row 1's last sampled token was never forwarded.
        nxt = [c + ids for c, (ids, _) in zip(contexts, first, strict=True)]
        outs[reuse] = sampler.sample(nxt, [4, 4])
        if reuse:
            assert sampler.turns.reused_tokens == (len(nxt[0]) - 1) + (len(nxt[1]) - 1)
            assert sampler.turns.encoded_tokens == sum(len(c) for c in contexts) + 2
    assert [ids for ids, _ in outs[True]] == [ids for ids, _ in outs[False]]
    for (_, a), (_, b) in zip(outs[True], outs[False], strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)


def test_a_lora_policy_reuses_the_cache_too(tmp_path):
    from peft import get_peft_model

    from ddai.trainer.modeling import lora_config

    model, tok = load_policy(str(build_tiny(tmp_path / "m")))
    torch.manual_seed(0)
    lora = get_peft_model(model, lora_config(r=4, alpha=8, dropout=0.0, target="all-linear"))
    for p in lora.parameters():  # a trained adapter: B is no longer zero
        if p.requires_grad:
            p.data.normal_(0, 0.05)
    lora.eval()
    stops = [tok.eos_token_id]
    plain, plain_tokens, _ = _turns(lora, tok, reuse=False, mode="sampled", stops=stops)
    reused, reused_tokens, turns = _turns(lora, tok, reuse=True, mode="sampled", stops=stops)
    assert turns.enabled and turns.reused_tokens > 0 and reused_tokens < plain_tokens
    for a, b in zip(plain, reused, strict=True):
        for (ids_a, lps_a), (ids_b, lps_b) in zip(a, b, strict=True):
            assert ids_a == ids_b
            torch.testing.assert_close(torch.tensor(lps_b), torch.tensor(lps_a), atol=1e-5, rtol=0)
