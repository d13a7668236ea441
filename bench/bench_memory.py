"""Benchmark: memory of the sampler and of a training pass, measured against the memory model.

Sampler: peak bytes of one ``HFSampler`` turn at two vocabulary sizes and two token counts, next
to plain ``generate(output_logits=True)`` (what the sampler did before: every step's logits
kept); the ratio ``growth(V_large) / growth(V_small)`` of the extra memory of the longer turn is
about 1 for the sampler (O(tokens)) and about ``V_large / V_small`` for the baseline
(O(tokens × vocab)). Then the memory model (``ddai.trainer.runtime.memory_model``) against measured
peaks of a sampler turn and of a checkpointed forward+backward: measured / predicted.

On the CPU peaks come from ``TensorMemoryMeter``; on a GPU from ``torch.cuda`` (there the model
is Qwen2.5-0.5B-shaped, random, bf16). Last, the model's table for Qwen2.5-3B and 7B on one
80 GB GPU (docs/training.md).

    python bench/bench_memory.py
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from ddai.trainer.episode.rollout import HFSampler
from ddai.trainer.runtime.memory_model import (
    MemoryEstimate,
    ModelShape,
    RunShape,
    estimate,
    sampler_bytes,
    training_activations,
)

# The CPU meter is test scaffolding under tests/oracles (not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracles.memory_meter import TensorMemoryMeter
from support.sampler_memory import Tok, generate_keeping_logits, qwen2

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


def _qwen(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool):
    from types import SimpleNamespace

    return ModelShape.from_config(
        SimpleNamespace(
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            vocab_size=vocab,
            tie_word_embeddings=tied,
        )
    )


# Qwen2.5 checkpoints' config.json values (3.09 B and 7.62 B parameters).
QWEN25_3B = _qwen(2048, 11008, 36, 16, 2, 151936, tied=True)
QWEN25_7B = _qwen(3584, 18944, 28, 28, 4, 152064, tied=False)


def gib(m: MemoryEstimate) -> dict[str, float]:
    """``m``'s components and peak in GiB, one decimal."""
    return {k: round(v / 1024**3, 1) for k, v in {**asdict(m), "peak": m.peak}.items()}


@contextlib.contextmanager
def peak():
    """Yields a dict whose ``bytes`` is the block's peak added memory."""
    out = {"bytes": 0}
    if CUDA:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        yield out
        torch.cuda.synchronize()
        out["bytes"] = torch.cuda.max_memory_allocated() - base
    else:
        with TensorMemoryMeter() as m:
            yield out
        out["bytes"] = m.peak


def model(vocab: int, hidden: int, layers: int, heads: int, kv: int, inter: int):
    dtype = torch.bfloat16 if CUDA else torch.float32
    return qwen2(vocab, hidden, layers, heads, kv, inter).to(DEV, dtype)


def sampler_peak(m, N: int, prompt: int, new: int, baseline: bool) -> int:
    ctx = [[5] * prompt] * N
    with peak() as p:
        if baseline:
            generate_keeping_logits(m, ctx, new)
        else:
            HFSampler(m, Tok(), stop_ids=[-1]).sample(ctx, [new] * N)
    return p["bytes"]


def growth_table(sizes, vocabs, N, prompt, short, long):
    print(f"sampler: {N} rollouts, extra peak of {long} vs {short} new tokens")
    rows = {}
    for V in vocabs:
        m = model(V, *sizes)
        for base in (False, True):
            g = sampler_peak(m, N, prompt, long, base) - sampler_peak(m, N, prompt, short, base)
            rows[(V, base)] = g
            name = "generate(output_logits)" if base else "HFSampler"
            print(f"  V={V:>6}  {name:<24} {g / 2**20:10.2f} MiB")
        del m
    for base in (False, True):
        name = "generate(output_logits)" if base else "HFSampler"
        ratio = rows[(vocabs[1], base)] / max(rows[(vocabs[0], base)], 1)
        print(f"  growth ratio V={vocabs[1]} / V={vocabs[0]}, {name}: {ratio:.2f}")


def model_check(sizes, vocab, N, prompt, new, b, T):
    m = model(vocab, *sizes)
    shape = ModelShape.from_config(m.config)
    act = 2 if CUDA else 4
    s_meas = sampler_peak(m, N, prompt, new, False)
    s_pred = sampler_bytes(shape, N, prompt + new, new, act)
    m.activation_checkpointing_enable({"use_reentrant": False})
    m.train()
    ids = torch.randint(0, vocab, (b, T), device=DEV)
    with peak() as p:
        logits = m(input_ids=ids, use_cache=False).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])
        logp.mean().backward()
        del logits, logp
    grads = sum(q.grad.numel() * q.grad.element_size() for q in m.parameters())
    t_meas = p["bytes"] - grads
    t_pred = training_activations(shape, b, T, act, checkpointing=True)
    print(f"memory model vs measured ({'cuda bf16' if CUDA else 'cpu fp32'}):")
    print(
        f"  sampler  {N}x{prompt + new}: measured {s_meas / 2**20:9.1f} MiB, "
        f"predicted {s_pred / 2**20:9.1f} MiB, ratio {s_meas / s_pred:.2f}"
    )
    print(
        f"  training {b}x{T}: measured {t_meas / 2**20:9.1f} MiB, "
        f"predicted {t_pred / 2**20:9.1f} MiB, ratio {t_meas / t_pred:.2f}"
    )


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_known_args()
    if CUDA:  # Qwen2.5-0.5B's shape
        sizes = (896, 24, 14, 2, 4864)
        growth_table(sizes, (16384, 151936), N=64, prompt=256, short=32, long=256)
        model_check(sizes, 151936, N=64, prompt=512, new=256, b=2, T=2048)
    else:
        sizes = (32, 1, 2, 1, 64)
        growth_table(sizes, (1024, 16384), N=4, prompt=4, short=8, long=64)
        model_check((48, 3, 4, 2, 96), 4096, N=6, prompt=10, new=24, b=3, T=96)
    print("memory model, one 80 GB GPU (GiB; 128 rollouts x 2048 context, micro-batch 1 x 2048):")
    for name, shape in (("Qwen2.5-3B", QWEN25_3B), ("Qwen2.5-7B", QWEN25_7B)):
        for label, run in (
            ("fp32 weights, AdamW", RunShape(weight_bytes=4)),
            ("bf16 weights, AdamW", RunShape(weight_bytes=2)),
            ("bf16 + LoRA r16", RunShape(weight_bytes=2, lora_r=16)),
        ):
            g = gib(estimate(shape, run))
            fits = "fits" if g["peak"] <= 80 else "does not fit"
            print(f"  {name} {label:<20} {g}  -> {fits}")


if __name__ == "__main__":
    main()
