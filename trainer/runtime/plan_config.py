"""The settings of ``ddai train plan`` (``PlanConfig``: each field's docstring is its flag's
help) and how a flag's value is read: GPU sizes, accelerate configs by name or YAML file.
Torch-free: the CLI reads it without loading a model library."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ddai.trainer.runtime.memory_model import STRATEGIES

GIB = 1 << 30
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(GiB|GB|MiB|MB|TiB|TB)?\s*$", re.IGNORECASE)
_UNITS = {"gib": GIB, "gb": 10**9, "mib": 1 << 20, "mb": 10**6, "tib": 1 << 40, "tb": 10**12}
WEIGHT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
MERGE = 2
"""Qwen2-VL's spatial merge: 2 × 2 patches of 14 px become one language-model token."""
PATCH = 14


def parse_size(text: str) -> int:
    """Bytes of ``80GiB``, ``141GB``, ``80`` (GiB when no unit); a bad size names the flag."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"--gpu-memory {text!r}: give a size such as 80GiB, 141GB or 80")
    return int(float(m[1]) * _UNITS[(m[2] or "GiB").lower()])


@dataclass
class PlanConfig:
    """One memory plan; every field is a flag of ``ddai train plan``."""

    model: str
    """A model config (a config.json-shaped file such as configs/models/qwen2.5-7b.json) or a
    model folder; built on the meta device, no weights read."""
    dtype: str = "bfloat16"
    """Weight dtype the run loads: bfloat16, float16 or float32 (DeepSpeed keeps bf16 weights
    whatever this says, with fp32 master copies of what trains)."""
    lora: bool = False
    """Train a float32 LoRA adapter on frozen weights (as --lora of train grpo/ppo)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_target: str = "all-linear"
    """LoRA target modules (peft syntax)."""
    accelerate: list[str] = field(default_factory=list)
    """Accelerate configs to plan: single, ddp, fsdp, zero2, zero3, or an accelerate YAML such as
    configs/accelerate/zero3.yaml; repeatable. Default: all five."""
    gpus: int = 8
    """GPUs the distributed configs run on (one process each)."""
    gpu_memory: str = "80GiB"
    """Memory of one GPU: 80GiB, 141GB, ..."""
    batch_size: int = 8
    """Rollouts each device samples together per step (train grpo/ppo --batch-size: prompts ×
    n_agent per device)."""
    micro_batch: int | None = None
    """Sequences per training forward on one device. Default: --batch-size (TRL's per-device
    batch in one pass)."""
    max_prompt_length: int = 1024
    """Prompt tokens of a sequence (the system prompt and question, images' tokens excluded)."""
    max_completion_length: int = 1024
    """Completion tokens of a sequence (every turn, observations included)."""
    gradient_checkpointing: bool = True
    """Recompute each decoder layer in the backward (the training commands' default)."""
    attention_scores: bool = True
    """Count attention's [heads, T, T] scores (eager or math attention, what the CPU runs);
    --no-attention-scores for flash-attention kernels on a GPU, which never hold them."""
    logits_chunk: int | None = None
    """Token positions whose logits the loss computes at a time (None: the micro-batch's whole
    [b, T, V] at once, as TRL's loss does)."""
    images: int = 0
    """Images per sequence (a vision-language policy)."""
    image_size: int = 1024
    """Side of a square image in pixels (Qwen2-VL resizes to a multiple of 28: each 28 × 28 px
    becomes one token)."""
    image_max_pixels: int = 12845056
    """The processor's max_pixels (Qwen2.5-VL-7B-Instruct's preprocessor_config.json): larger
    images are scaled down to it."""

    def check(self) -> None:
        """Refuse bad settings, naming the flag."""
        if not self.lora:
            from ddai.trainer.run_settings import refuse_lora_settings

            refuse_lora_settings(self)
        if self.dtype not in WEIGHT_BYTES:
            raise ValueError(f"--dtype {self.dtype!r}: use one of {', '.join(WEIGHT_BYTES)}")
        for name in ("gpus", "batch_size", "lora_r", "max_prompt_length", "image_size",
                     "image_max_pixels"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        for name in ("micro_batch", "logits_chunk"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.max_completion_length < 1 or self.images < 0:
            raise ValueError("--max-completion-length must be >= 1 and --images >= 0")
        parse_size(self.gpu_memory)
        self.strategies()

    def strategies(self) -> list[str]:
        """The ``STRATEGIES`` to plan, YAML files read for their distributed type."""
        return [strategy_of(a) for a in self.accelerate] or list(STRATEGIES)


def strategy_of(name: str) -> str:
    """``zero3`` of ``zero3`` or of an accelerate YAML whose ``distributed_type`` is DEEPSPEED with
    ``zero_stage: 3`` (MULTI_GPU: ddp, FSDP: fsdp, NO: single)."""
    if name in STRATEGIES:
        return name
    path = Path(name)
    if not path.is_file():
        raise ValueError(
            f"--accelerate {name!r}: use one of {', '.join(STRATEGIES)} or an accelerate YAML "
            "(configs/accelerate/*.yaml)"
        )
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    kind = str(doc.get("distributed_type", "NO")).upper()
    if kind == "DEEPSPEED":
        stage = int((doc.get("deepspeed_config") or {}).get("zero_stage", 0))
        if stage in (2, 3):
            return f"zero{stage}"
        raise ValueError(f"--accelerate {name}: ZeRO stage {stage} is not planned; use 2 or 3")
    table = {"MULTI_GPU": "ddp", "FSDP": "fsdp", "NO": "single"}
    if kind not in table:
        raise ValueError(f"--accelerate {name}: distributed_type {kind} is not planned")
    return table[kind]
