"""The sampler-memory comparison ``tests/trainer/runtime/test_memory.py`` runs on the CPU and
``bench/bench_memory.py`` at real sizes: a seeded Qwen2 of a given shape, the stub tokenizer
``HFSampler`` needs, and the control that keeps every step's logits."""

from __future__ import annotations

from typing import Any


class Tok:
    """The two ids ``HFSampler`` reads off a tokenizer."""

    pad_token_id, eos_token_id = 0, 1


def qwen2(vocab: int, hidden: int, layers: int, heads: int, kv: int, inter: int) -> Any:
    """A Qwen2 causal LM of this shape, weights drawn from seed 0, in eval mode (float32, CPU)."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
    )
    return transformers.Qwen2ForCausalLM(cfg).eval()


def generate_keeping_logits(model: Any, ctx: list[list[int]], n: int) -> None:
    """``model.generate`` sampling exactly ``n`` tokens after each row of ``ctx`` (rows of one
    length) with every step's logits kept: the ``O(tokens × vocab)`` memory a sampler avoids."""
    import torch

    ids = torch.tensor(ctx, device=model.device)
    with torch.no_grad():
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=n,
            min_new_tokens=n,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
