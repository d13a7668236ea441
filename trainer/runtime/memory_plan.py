"""``ddai train plan``: a run's per-rank memory before it meets a GPU.

The policy is built on the meta device (shapes, no weights) from a model config: a
``config.json``-shaped file (``configs/models/qwen2.5-7b.json``, ``qwen2.5-vl-7b.json``) or a
model folder; with ``lora`` peft wraps it as the training commands do, so the parameter counts are
the real model's. ``memory_model`` turns them and the run's settings into bytes per rank for each
accelerate config (``STRATEGIES``): model states (weights, gradients, AdamW, DeepSpeed's master
weights, what sharding gathers), the training pass (decoder activations with or without
checkpointing, the loss pass's logits, the vision tower over the images' patches) and the sampler
(KV cache, one decoding step's vocabulary buffers, under ZeRO-3 the full weights TRL gathers for
generation). The two phases never overlap: the peak is the model states plus the larger.

Not counted: the CUDA context and allocator fragmentation (a few GiB: keep headroom), NCCL
buffers, and a vLLM server's memory (``--vllm`` runs generation elsewhere).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.trainer.runtime.memory_model import (
    ModelShape,
    ModelStates,
    ParamCounts,
    kv_cache_bytes,
    layer_activations,
    logit_bytes,
    model_states,
    sampler_bytes,
)
from ddai.trainer.runtime.plan_config import (
    GIB,
    MERGE,
    PATCH,
    WEIGHT_BYTES,
    PlanConfig,
    parse_size,
    strategy_of,
)

__all__ = ["GIB", "PlanConfig", "parse_size", "plan", "strategy_of"]


# ----------------------------------------------------------------------------- the meta model


def load_config(model: str) -> Any:
    """The transformers config of a config file or a model folder (offline)."""
    import os

    from transformers import AutoConfig

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(model)
    if path.is_file():
        doc = json.loads(path.read_text(encoding="utf-8"))
        if "model_type" not in doc:
            raise ValueError(f"--model {model}: a config file needs its model_type (config.json)")
        return AutoConfig.for_model(**doc)
    if path.is_dir() and not (path / "config.json").is_file():
        raise ValueError(f"--model {model}: no config.json in this folder")
    try:
        return AutoConfig.from_pretrained(model)
    except OSError as e:  # no such path, nor a hub id in the local cache
        raise ValueError(
            f"--model {model}: no such file or folder, nor a hub id in the local cache (nothing "
            "is downloaded); pass a model config (configs/models/*.json) or a model folder"
        ) from e


def meta_model(config: Any, *, dtype: str, lora: bool, lora_r: int, lora_target: str) -> Any:
    """The policy on the meta device in ``dtype`` (a VLM when the config has a vision tower), as
    peft wraps it with ``lora`` (float32 adapter)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    auto = AutoModelForImageTextToText if is_vlm(config) else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, dtype=getattr(torch, dtype))
    if lora:
        import warnings

        from peft import get_peft_model

        from ddai.trainer.modeling import lora_config

        with warnings.catch_warnings():
            # peft asks the model the deprecated ``is_gradient_checkpointing``; the plan's output
            # is the table, not transformers' rename notice.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            model = get_peft_model(
                model, lora_config(r=lora_r, alpha=2 * lora_r, dropout=0.0, target=lora_target)
            )
    return model


def is_vlm(config: Any) -> bool:
    return getattr(config, "vision_config", None) is not None


def param_counts(model: Any) -> ParamCounts:
    """Total, trained and largest-module parameter counts (shared tensors once)."""
    seen: dict[int, tuple[int, bool]] = {}
    for p in model.parameters():
        seen[id(p)] = (p.numel(), p.requires_grad)
    largest = max(
        (sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()), default=0
    )
    return ParamCounts(
        total=sum(n for n, _ in seen.values()),
        trained=sum(n for n, g in seen.values() if g),
        largest_module=largest,
    )


def text_shape(config: Any, params: int) -> ModelShape:
    """The language model's ``ModelShape`` (a VLM's text config), ``params`` as counted."""
    from types import SimpleNamespace

    text = config.get_text_config()
    tied = bool(getattr(config, "tie_word_embeddings", getattr(text, "tie_word_embeddings", False)))
    shape = ModelShape.from_config(
        SimpleNamespace(
            hidden_size=text.hidden_size,
            intermediate_size=text.intermediate_size,
            num_hidden_layers=text.num_hidden_layers,
            num_attention_heads=text.num_attention_heads,
            num_key_value_heads=getattr(text, "num_key_value_heads", text.num_attention_heads),
            vocab_size=text.vocab_size,
            tie_word_embeddings=tied,
        )
    )
    return dataclasses.replace(shape, params=params)


def image_tokens(side: int, max_pixels: int) -> int:
    """Language-model tokens of a ``side × side`` image under Qwen2-VL's processor: resized by its
    own ``smart_resize`` (sides a multiple of 28 = ``MERGE × PATCH``, at most ``max_pixels``),
    one token per 28 × 28 block."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    unit = MERGE * PATCH
    h, w = smart_resize(side, side, factor=unit, max_pixels=max_pixels)
    return (h // unit) * (w // unit)


def vision_activations(
    config: Any, images: int, patches: int, act_bytes: int, checkpointing: bool, scores: bool
) -> int:
    """The vision tower's training-pass activations over ``images`` images of ``patches`` patches
    each (the decoder-layer rule of ``memory_model`` on the tower's sizes; attention stays inside
    an image; the merger's output is the language model's tokens)."""
    v = config.vision_config
    shape = ModelShape(
        params=0,
        layers=int(v.depth),
        hidden=int(v.hidden_size),
        intermediate=int(v.intermediate_size),
        heads=int(v.num_heads),
        kv_heads=int(v.num_heads),
        vocab=0,
    )
    return layer_activations(shape, images, patches, act_bytes, checkpointing, scores=scores)


# ----------------------------------------------------------------------------- the plan


def activation_bytes(dtype: str, strategy: str) -> int:
    """Bytes of an activation: half precision, except float32 weights in one process (the
    shipped multi-GPU configs all run bf16 mixed precision)."""
    return 4 if dtype == "float32" and strategy == "single" else 2


@dataclass
class StrategyPlan:
    """One accelerate config's per-rank bytes and whether the peak fits one GPU."""

    strategy: str
    ranks: int
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    gathered_bytes: int
    activations_bytes: int
    logits_bytes: int
    vision_bytes: int
    kv_cache_bytes: int
    sampler_bytes: int
    generation_weights_bytes: int
    train_peak_bytes: int
    sample_peak_bytes: int
    peak_bytes: int
    headroom_bytes: int
    fits: bool


@dataclass
class PlanResult:
    model: str
    architecture: str
    parameters: int
    trained_parameters: int
    largest_module_parameters: int
    lora: bool
    dtype: str
    gpus: int
    gpu_memory_bytes: int
    micro_batch: int
    sequence_tokens: int
    image_tokens: int
    rollouts_per_rank: int
    logits_chunk: int | None
    gradient_checkpointing: bool
    attention_scores: bool
    strategies: list[StrategyPlan]
    fits: list[str]


def strategy_plan(
    strategy: str,
    states: ModelStates,
    *,
    cfg: PlanConfig,
    shape: ModelShape,
    counts: ParamCounts,
    vision: int,
    seq: int,
    micro: int,
    gpu: int,
) -> StrategyPlan:
    """Put one config's model states beside the run's training pass and sampler."""
    act = activation_bytes(cfg.dtype, strategy)
    acts = layer_activations(
        shape, micro, seq, act, cfg.gradient_checkpointing, scores=cfg.attention_scores
    )
    logits = logit_bytes(shape, micro * seq, cfg.logits_chunk)
    context = seq
    kv = kv_cache_bytes(shape, cfg.batch_size, context, act)
    sampler = sampler_bytes(shape, cfg.batch_size, context, cfg.max_completion_length, act)
    # ZeRO-3 generates with the whole model gathered on every rank (TRL's
    # ds3_gather_for_generation); FSDP gathers one unit at a time, as in training.
    gen_weights = counts.total * 2 - states.weights if strategy == "zero3" else 0
    train = acts + logits + vision + states.gathered
    sample = sampler + (gen_weights if strategy == "zero3" else states.gathered)
    peak = states.sharded + max(train, sample)
    return StrategyPlan(
        strategy=strategy,
        ranks=1 if strategy == "single" else cfg.gpus,
        weights_bytes=states.weights,
        grads_bytes=states.grads,
        optimizer_bytes=states.optimizer,
        gathered_bytes=states.gathered,
        activations_bytes=acts,
        logits_bytes=logits,
        vision_bytes=vision,
        kv_cache_bytes=kv,
        sampler_bytes=sampler,
        generation_weights_bytes=gen_weights,
        train_peak_bytes=states.sharded + train,
        sample_peak_bytes=states.sharded + sample,
        peak_bytes=peak,
        headroom_bytes=gpu - peak,
        fits=peak <= gpu,
    )


def plan(cfg: PlanConfig) -> PlanResult:
    """The memory plan of ``cfg``: per accelerate config, per rank."""
    cfg.check()
    config = load_config(cfg.model)
    model = meta_model(
        config, dtype=cfg.dtype, lora=cfg.lora, lora_r=cfg.lora_r, lora_target=cfg.lora_target
    )
    counts = param_counts(model)
    shape = text_shape(config, counts.total)
    vlm = is_vlm(config)
    if cfg.images and not vlm:
        raise ValueError(f"--images {cfg.images}: {cfg.model} has no vision tower (not a VLM)")
    img_tokens = cfg.images * image_tokens(cfg.image_size, cfg.image_max_pixels)
    seq = cfg.max_prompt_length + cfg.max_completion_length + img_tokens
    micro = cfg.micro_batch or cfg.batch_size
    gpu = parse_size(cfg.gpu_memory)
    rows = []
    for strategy in cfg.strategies():
        states = model_states(
            counts,
            strategy,
            cfg.gpus,
            weight_bytes=WEIGHT_BYTES[cfg.dtype],
            lora=cfg.lora,
        )
        act = activation_bytes(cfg.dtype, strategy)
        patches = image_tokens(cfg.image_size, cfg.image_max_pixels) * MERGE * MERGE
        vision = 0
        if cfg.images:
            vision = vision_activations(
                config, micro * cfg.images, patches, act, cfg.gradient_checkpointing,
                cfg.attention_scores,
            )  # fmt: skip
        rows.append(
            strategy_plan(
                strategy,
                states,
                cfg=cfg,
                shape=shape,
                counts=counts,
                vision=vision,
                seq=seq,
                micro=micro,
                gpu=gpu,
            )
        )
    return PlanResult(
        model=str(cfg.model),
        architecture=type(model.get_base_model() if cfg.lora else model).__name__,
        parameters=counts.total,
        trained_parameters=counts.trained,
        largest_module_parameters=counts.largest_module,
        lora=cfg.lora,
        dtype=cfg.dtype,
        gpus=cfg.gpus,
        gpu_memory_bytes=gpu,
        micro_batch=micro,
        sequence_tokens=seq,
        image_tokens=img_tokens,
        rollouts_per_rank=cfg.batch_size,
        logits_chunk=cfg.logits_chunk,
        gradient_checkpointing=cfg.gradient_checkpointing,
        attention_scores=cfg.attention_scores,
        strategies=rows,
        fits=[r.strategy for r in rows if r.fits],
    )
