"""Memory, measured on the CPU with ``TensorMemoryMeter``: the sampler's peak grows with tokens,
not tokens × vocabulary (two vocabulary sizes, and a control that shows the meter sees the
``output_logits`` pattern it replaced), and the memory model (docs/training.md) agrees with measurements at
tiny scale (exact for weights, gradients and optimizer state; within 35% for activations and the
sampler, on shapes other than those its constants were measured on)."""

from __future__ import annotations

import pytest
from support.lazy import heavy, torch, transformers
from support.sampler_memory import Tok, generate_keeping_logits, qwen2

from ddai.trainer.episode.rollout import HFSampler
from ddai.trainer.runtime.memory_model import (
    ModelShape,
    RunShape,
    estimate,
    sampler_bytes,
    training_activations,
)

memory_meter = heavy("oracles.memory_meter")

N, SHORT, LONG = 4, 8, 64


def _model(vocab, hidden=32, layers=1, heads=2, kv=1):
    return qwen2(vocab, hidden, layers, heads, kv, 2 * hidden)


def _peak(fn):
    with memory_meter.TensorMemoryMeter() as m:
        fn()
    return m.peak


def test_meter_counts_live_storages_by_hand():
    with memory_meter.TensorMemoryMeter() as m:
        a = torch.zeros(1000)  # 4000 bytes
        b = torch.zeros(500)  # 2000
        view = b[10:]  # no new storage
        del a
        c = torch.zeros(2000)  # 8000: peak is b + c
    assert m.peak == 10_000 and m.live == 10_000
    del b, c, view
    assert m.live == 0


def _sampler_growth(vocab):
    model = _model(vocab)
    sampler = HFSampler(model, Tok(), stop_ids=[-1])  # no stop: every row decodes its budget
    ctx = [[5, 6, 7, 8]] * N
    short = _peak(lambda: sampler.sample(ctx, [SHORT] * N))
    long = _peak(lambda: sampler.sample(ctx, [LONG] * N))
    return long - short


def _logits_growth(vocab):
    model, ctx = _model(vocab), [[5] * 4] * N
    long = _peak(lambda: generate_keeping_logits(model, ctx, LONG))
    return long - _peak(lambda: generate_keeping_logits(model, ctx, SHORT))


def test_sampler_memory_grows_with_tokens_not_tokens_times_vocab():
    small, large = 1024, 16384
    per_vocab_row = N * (LONG - SHORT) * 4  # bytes of one more [N, n] float32 "vocab row"
    g_small, g_large = _sampler_growth(small), _sampler_growth(large)
    # 56 more tokens cost the same at both vocabulary sizes (KV cache and [N, n] log-probs)...
    assert abs(g_large - g_small) < 0.01 * per_vocab_row * (large - small)
    # ...and far less than keeping their logits would, even at the small vocabulary.
    assert 0 < g_small < 0.1 * per_vocab_row * small
    # Control: the meter sees the O(tokens x vocab) of generate(output_logits=True).
    assert _logits_growth(large) > per_vocab_row * large


@pytest.mark.parametrize("tied", [False, True])
def test_memory_model_weights_grads_optimizer_are_exact(tied):
    model = _model(96, hidden=32, layers=2, heads=4, kv=2)
    if tied:
        model = transformers.Qwen2ForCausalLM(
            transformers.Qwen2Config(**{**model.config.to_dict(), "tie_word_embeddings": True})
        )
    shape = ModelShape.from_config(model.config)
    assert shape.params == sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    est = estimate(shape, RunShape(weight_bytes=4))
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    state = sum(
        t.numel() * t.element_size()
        for s in opt.state.values()
        for k, t in s.items()
        if k != "step"
    )
    assert (est.weights, est.grads, est.optimizer) == (shape.params * 4, grads, state)


def test_memory_model_lora_parameter_count_matches_peft():
    from peft import LoraConfig, get_peft_model

    model = _model(96, hidden=32, layers=2, heads=4, kv=2)
    shape = ModelShape.from_config(model.config)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert shape.lora_params(4) == trainable


def test_memory_model_activations_and_sampler_within_35_percent_of_measured():
    from trl.trainer.utils import selective_log_softmax

    vocab, hidden, layers, b, T = 4096, 48, 3, 3, 96
    model = _model(vocab, hidden=hidden, layers=layers, heads=4, kv=2)
    model.activation_checkpointing_enable({"use_reentrant": False})
    model.train()
    ids = torch.randint(0, vocab, (b, T))

    def step():
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        selective_log_softmax(logits, ids[:, 1:]).mean().backward()

    measured = _peak(step) - sum(p.numel() * 4 for p in model.parameters())  # less the grads
    shape = ModelShape.from_config(model.config)
    predicted = training_activations(shape, b, T, 4, checkpointing=True)
    assert measured == pytest.approx(predicted, rel=0.35)

    model.eval()
    sampler = HFSampler(model, Tok(), stop_ids=[-1])
    rollouts, prompt, new = 6, 10, 24
    measured = _peak(lambda: sampler.sample([[5] * prompt] * rollouts, [new] * rollouts))
    predicted = sampler_bytes(shape, rollouts, prompt + new, new, 4)
    assert measured == pytest.approx(predicted, rel=0.35)
