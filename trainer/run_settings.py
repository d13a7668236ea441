"""The settings every training run spells the same, defined once: the policy's weights, seed and
LoRA (``PolicyRun``: ``ddai train sft``/``grpo``/``ppo``), TRL's run knobs (``TrlKnobs``: ``train
sft``/``grpo``) and where a run goes (``LaunchSettings``: ``--launch``). The run configs derive
from these mixins, so a field's default and docstring (its flag's help) have one definition.
Import-light (no torch): ``--help`` reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(kw_only=True)
class PolicyRun:
    """The policy a training run starts from and writes, its weights' dtype, seed and LoRA."""

    model: str
    """Starting model: a local folder or a hub id (loaded with from_pretrained)."""
    output_dir: Path
    """Output folder: checkpoints, metrics and the final model."""
    dtype: str = "float32"
    """Weight dtype: float32 (default; a GPU still computes in bf16 autocast), bfloat16, float16
    or auto. ``train grpo`` / ``train ppo`` refuse half-precision weights that --lr is too small
    to change (pure bf16 at lr 1e-6); add --lora to train a float32 adapter."""
    seed: int = 0
    """Random seed."""
    lora: bool = False
    """Train a float32 LoRA adapter (peft) on frozen weights, under every accelerate config (ZeRO-3
    included), e.g. a 7B policy in bfloat16 on one 80 GB GPU; the adapter goes to <out>/adapter,
    the merged model to <out>: merged in float32 (a bfloat16 merge at lr 1e-6 would round the
    update away) and checked against the trained model's logits."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha."""
    lora_target: str = "all-linear"
    """LoRA target modules (peft syntax)."""

    def check_lora(self) -> None:
        """Refuse LoRA settings given without --lora: they shape an adapter no run trains, so
        they would be parsed and ignored."""
        if not self.lora:
            refuse_lora_settings(self)


LORA_FLAGS = ("lora_r", "lora_alpha", "lora_target")
"""The settings that shape a LoRA adapter, each a flag of the commands that have --lora."""


def refuse_lora_settings(cfg: Any) -> None:
    """``TrainConfigError`` naming the ``LORA_FLAGS`` of ``cfg`` set away from their defaults."""
    from ddai.pipelines.records.defaults import changed

    if names := changed(cfg, LORA_FLAGS):
        from ddai.trainer.common import TrainConfigError

        flags = ", ".join("--" + name.replace("_", "-") for name in names)
        raise TrainConfigError(
            f"{flags} without --lora: they shape a LoRA adapter, which only --lora trains; "
            "add --lora or drop them"
        )


@dataclass(kw_only=True)
class TrlKnobs:
    """The TRL run knobs of ``train sft``/``grpo``: steps, learning rate, the TRL config file, metric
    sinks, checkpointing and resuming (None: TRL's, or the room's, default)."""

    max_steps: int | None = None
    """Stop after this many optimizer steps."""
    learning_rate: float | None = None
    """Learning rate."""
    config_file: Path | None = None
    """TOML/YAML file of TRL config knobs (flat, or under a [trl] table)."""
    report_to: str | None = None
    """Metric sinks, comma-separated: jsonl (default) or csv file, plus integrations such as
    tensorboard; ``none`` for nothing."""
    save_steps: int | None = None
    """Checkpoint every N steps."""
    logging_steps: int | None = None
    """Log metrics every N steps."""
    resume: bool = False
    """Continue from the last checkpoint in --out-dir."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Any TRL config knob as KEY=VALUE (JSON values); repeatable; wins over all."""


@dataclass(kw_only=True)
class LaunchSettings:
    """Where a training command runs: this process, or N under ``accelerate launch``."""

    launch: int | None = None
    """Run this command on N processes under ``accelerate launch`` (GPUs, or gloo on CPU);
    --batch-size stays per process, so the global batch is N × --batch-size."""
    accelerate_config: Path | None = None
    """accelerate config file for --launch (configs/accelerate/{ddp,zero2,zero3,fsdp}.yaml or your
    own). Default: plain data parallel."""
