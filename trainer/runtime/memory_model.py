"""How much memory a GRPO/PPO run needs on one device: weights, gradients, optimizer state,
training-pass activations and the sampler, per component in bytes.

The weight, gradient and optimizer terms are exact (bytes per parameter). The activation and
sampler terms count tensors of known shapes with multiplicities measured at tiny scale on the CPU
(``TensorMemoryMeter``; ``tests/trainer/runtime/test_memory.py`` checks the model against fresh
measurements):

- training pass with activation checkpointing: one ``[b, T, H]`` hidden state kept per layer,
  one layer's activations recomputed at a time (``[b, T, 8H + 4I]`` plus ``[b, heads, T, T]``
  attention scores), and ``LOGIT_COPIES`` float32 ``[b, T, V]`` logit buffers (logits,
  log-softmax and their gradients): the loss pass is the one place memory grows with tokens ×
  vocabulary, bounded by the micro-batch ``b``;
- sampler: the KV cache ``[2, L, N, ctx, kv_heads, head_dim]`` plus ``SAMPLER_VOCAB_COPIES``
  float32 ``[N, V]`` buffers of one decoding step and ``[N, n]`` log-probs: O(tokens), not
  O(tokens × vocab).

Under an accelerate config (``model_states``) the weights, gradients and optimizer state are
split as that config splits them, per rank: DDP and a single process keep everything whole (DDP
adds its gradient buckets), FSDP shards all three, DeepSpeed ZeRO-2 shards gradients and
optimizer state, ZeRO-3 the weights too. DeepSpeed (the shipped configs run it in bf16) keeps the
module in bf16 and, per trained parameter, an fp32 master copy, fp32 gradient partition and the
two AdamW moments (2 + 16 bytes, and under ZeRO-2 a bf16 gradient partition: DeepSpeed's own
estimators count 18 per parameter for both stages, the weights whole under ZeRO-2); the
sharded configs also hold the largest module's full weights while it computes, and one prefetched
(``4 × largest`` bytes at bf16, DeepSpeed's ZeRO-3 estimator's term). ``memory_plan`` builds a
model on the meta device and puts these together for ``ddai train plan``.
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


def layer_activations(
    m: ModelShape, b: int, T: int, act_bytes: int, checkpointing: bool, *, scores: bool = True
) -> int:
    """Peak bytes of the decoder layers' activations in one forward+backward over ``[b, T]``
    tokens (without the logits: ``logit_bytes``); ``scores``: attention materialises its float32
    ``[b, heads, T, T]`` scores (eager or math-SDPA attention, the CPU's; flash kernels do not)."""
    layer = b * T * (8 * m.hidden + 4 * m.intermediate) * act_bytes
    layer += b * m.heads * T * T * 4 if scores else 0
    kept = b * T * m.hidden * act_bytes * m.layers if checkpointing else layer * m.layers
    return int(kept + (layer if checkpointing else 0))


def logit_bytes(m: ModelShape, positions: int, chunk: int | None = None) -> int:
    """Peak bytes of the loss pass's logits over ``positions`` token positions: ``LOGIT_COPIES``
    float32 ``[positions, V]`` buffers, or ``[chunk, V]`` when the loss runs ``chunk`` positions
    at a time (each chunk recomputed in the backward)."""
    rows = positions if chunk is None else min(chunk, positions)
    return int(LOGIT_COPIES * rows * m.vocab * 4)


def training_activations(
    m: ModelShape, b: int, T: int, act_bytes: int, checkpointing: bool, chunk: int | None = None
) -> int:
    """Peak activation bytes of one forward+backward over ``[b, T]`` tokens, logits included."""
    return layer_activations(m, b, T, act_bytes, checkpointing) + logit_bytes(m, b * T, chunk)


def kv_cache_bytes(m: ModelShape, N: int, context: int, act_bytes: int) -> int:
    """Bytes of a full-attention KV cache: ``[2, layers, N, kv_heads, context, head_dim]``."""
    return 2 * m.layers * N * context * m.kv_heads * m.head_dim * act_bytes


def sampler_bytes(m: ModelShape, N: int, context: int, new_tokens: int, act_bytes: int) -> int:
    """Peak bytes of decoding ``N`` sequences up to ``context`` tokens."""
    kv = kv_cache_bytes(m, N, context, act_bytes)
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


STRATEGIES = ("single", "ddp", "fsdp", "zero2", "zero3")
"""The accelerate configs a plan covers: one process, and the four ``configs/accelerate/`` ship."""
DEEPSPEED_WEIGHT_BYTES = 2
"""DeepSpeed runs the shipped configs in bf16: the module's weights are bf16 whatever --dtype."""


@dataclass(frozen=True)
class ParamCounts:
    """A model's parameters as the optimizer sees them (counted on the meta device)."""

    total: int
    """Every parameter (a LoRA adapter's included)."""
    trained: int
    """Those that train: the adapter with LoRA, else all."""
    largest_module: int
    """Parameters of the largest single module (its own, not its children's): the embedding or
    LM head of a language model, what a sharded config gathers at once at most."""


@dataclass(frozen=True)
class ModelStates:
    """Per-rank bytes of the weights, gradients and optimizer state under one accelerate config;
    ``gathered`` is what a sharded config holds unsharded while a module computes."""

    weights: int
    grads: int
    optimizer: int
    """AdamW's two moments, and DeepSpeed's fp32 master weights."""
    gathered: int

    @property
    def sharded(self) -> int:
        """Weights + gradients + optimizer state: what accelerate's estimate counts (per rank)."""
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.sharded + self.gathered


def model_states(
    p: ParamCounts, strategy: str, world: int, *, weight_bytes: int, lora: bool
) -> ModelStates:
    """The per-rank model states of ``p`` trained under ``strategy`` on ``world`` ranks.

    ``weight_bytes``: the loaded weights' dtype (2 bf16, 4 float32); a LoRA adapter is float32 on
    top (peft's default), the frozen base never has gradients or optimizer state. DDP/FSDP keep
    each tensor in its own dtype and ``torch.optim.AdamW`` keeps its moments in it; DeepSpeed
    keeps the module in bf16 and 16 fp32 bytes per trained parameter (master, gradient, moments).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown accelerate config {strategy!r}; use one of {STRATEGIES}")
    n = 1 if strategy == "single" else int(world)
    frozen, trained = p.total - p.trained, p.trained
    if strategy in ("zero2", "zero3"):
        wb = DEEPSPEED_WEIGHT_BYTES
        weights = p.total * wb
        states = trained * 12 // n  # fp32 master + exp_avg + exp_avg_sq, partitioned
        grads = trained * 4 // n  # fp32 gradient partition
        if strategy == "zero3":
            return ModelStates(weights // n, grads, states, 2 * p.largest_module * wb)
        return ModelStates(weights, grads + trained * wb // n, states, 0)  # + bf16 grad partition
    tb = 4 if lora else weight_bytes
    weights = frozen * weight_bytes + trained * tb
    grads, optimizer = trained * tb, 2 * trained * tb
    if strategy == "fsdp":
        return ModelStates(weights // n, grads // n, optimizer // n, 2 * p.largest_module * 2)
    buckets = grads if strategy == "ddp" else 0  # DDP's reducer buckets: a second gradient copy
    return ModelStates(weights, grads + buckets, optimizer, 0)
