"""How much memory a GRPO/PPO run needs on one device: weights, gradients, optimizer state,
training-pass activations and the sampler, per component in bytes.

The weight, gradient and optimizer terms are exact (bytes per parameter). The activation and
sampler terms count tensors of known shapes with multiplicities measured at tiny scale on the CPU
(``TensorMemoryMeter``; ``tests/trainer/test_memory.py`` checks the model against fresh
measurements):

- training pass with activation checkpointing: one ``[b, T, H]`` hidden state kept per layer,
  one layer's activations recomputed at a time (``[b, T, 8H + 4I]`` plus ``[b, heads, T, T]``
  attention scores), and ``LOGIT_COPIES`` float32 ``[b, T, V]`` logit buffers (logits,
  log-softmax and their gradients): the loss pass is the one place memory grows with tokens ×
  vocabulary, bounded by the micro-batch ``b``;
- sampler: the KV cache ``[2, L, N, ctx, kv_heads, head_dim]`` plus ``SAMPLER_VOCAB_COPIES``
  float32 ``[N, V]`` buffers of one decoding step and ``[N, n]`` log-probs: O(tokens), not
  O(tokens × vocab).
"""

from __future__ import annotations

from dataclasses import dataclass

LOGIT_COPIES = 4.0
"""Float32 ``[b, T, V]`` buffers alive at the loss pass's peak (measured: 3.5-3.9)."""
SAMPLER_VOCAB_COPIES = 14.0
"""Float32 ``[N, V]`` buffers alive at a decoding step's peak (measured on the CPU: 14.0)."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes (its ``config.json``)."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config) -> ModelShape:
        """From a transformers config (``params`` counted from the shapes, embeddings tied or not
        as the config says)."""
        H, F, L, V = (
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            config.vocab_size,
        )
        kv = config.num_key_value_heads * (H // config.num_attention_heads)
        per_layer = H * (H + 2 * kv) + (H + 2 * kv) + H * H + 3 * H * F + 2 * H
        emb = V * H * (1 if getattr(config, "tie_word_embeddings", False) else 2)
        return cls(
            params=L * per_layer + emb + H,
            layers=L,
            hidden=H,
            intermediate=F,
            heads=config.num_attention_heads,
            kv_heads=config.num_key_value_heads,
            vocab=V,
        )

    def lora_params(self, r: int) -> int:
        """Adapter parameters of rank ``r`` on every linear layer (peft's ``all-linear``)."""
        H, F, kv = self.hidden, self.intermediate, self.kv_heads * self.head_dim
        shapes = [(H, H), (H, kv), (H, kv), (H, H), (H, F), (H, F), (F, H)]
        return self.layers * sum(r * (a + b) for a, b in shapes)


@dataclass(frozen=True)
class RunShape:
    """What one device does in a step."""

    weight_bytes: int = 2
    """2: bf16 weights; 4: float32."""
    lora_r: int | None = None
    """LoRA rank (float32 adapter, base frozen); None: every weight trains."""
    micro_batch: int = 1
    """Sequences per training forward (TRL's per-device batch, chunked)."""
    seq_len: int = 2048
    """Prompt + completion tokens of a training sequence."""
    rollouts: int = 128
    """Sequences the sampler decodes together."""
    context: int = 2048
    """Longest context the sampler holds in its KV cache."""
    checkpointing: bool = True


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per component; ``total`` is their sum (the sampler and the training pass do not
    overlap in time, so the peak is weights + grads + optimizer + the larger of the two)."""

    weights: int
    grads: int
    optimizer: int
    activations: int
    sampler: int

    @property
    def peak(self) -> int:
        return self.weights + self.grads + self.optimizer + max(self.activations, self.sampler)


def training_activations(m: ModelShape, b: int, T: int, act_bytes: int, checkpointing: bool) -> int:
    """Peak activation bytes of one forward+backward over ``[b, T]`` tokens."""
    layer = b * T * (8 * m.hidden + 4 * m.intermediate) * act_bytes + b * m.heads * T * T * 4
    kept = b * T * m.hidden * act_bytes * m.layers if checkpointing else layer * m.layers
    return int(kept + (layer if checkpointing else 0) + LOGIT_COPIES * b * T * m.vocab * 4)


def sampler_bytes(m: ModelShape, N: int, context: int, new_tokens: int, act_bytes: int) -> int:
    """Peak bytes of decoding ``N`` sequences up to ``context`` tokens."""
    kv = 2 * m.layers * N * context * m.kv_heads * m.head_dim * act_bytes
    return int(kv + SAMPLER_VOCAB_COPIES * N * m.vocab * 4 + N * new_tokens * 4)


def estimate(m: ModelShape, run: RunShape) -> MemoryEstimate:
    """The memory model of ``m`` trained as ``run`` says (AdamW: two state tensors per trained
    weight, in the weight's dtype, as ``torch.optim.AdamW`` keeps them)."""
    if run.lora_r is not None:
        trained, trained_bytes = m.lora_params(run.lora_r), 4
        weights = m.params * run.weight_bytes + trained * 4
    else:
        trained, trained_bytes = m.params, run.weight_bytes
        weights = m.params * run.weight_bytes
    act = 2 if run.weight_bytes == 2 else 4
    return MemoryEstimate(
        weights=weights,
        grads=trained * trained_bytes,
        optimizer=2 * trained * trained_bytes,
        activations=training_activations(m, run.micro_batch, run.seq_len, act, run.checkpointing),
        sampler=sampler_bytes(m, run.rollouts, run.context, run.context, act),
    )
