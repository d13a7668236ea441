"""``ddai train sft``'s run config: its fields are the command's flags, read by ``--help`` without
importing the trainer (``trainer/sft/train.py``, which re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class SFTRunConfig:
    """One SFT run; every field has a flag in ``ddai train sft``."""

    model: str
    """Local folder or hub id of the starting model (loaded with ``from_pretrained``)."""
    data: list[Path]
    """Parquet/JSONL files with a ``messages`` column."""
    output_dir: Path
    """Checkpoints, metrics and the final model go here."""
    epochs: float | None = None
    """Training epochs."""
    max_steps: int | None = None
    learning_rate: float | None = None
    batch_size: int | None = None
    """Conversations per device step."""
    grad_accum: int | None = None
    """Gradient accumulation steps."""
    max_length: int | None = None
    """Truncate conversations to this many tokens."""
    assistant_only_loss: bool = True
    """Loss on the Searcher's turns only (observations and the prompt masked)."""
    lora: bool = False
    """Train a float32 LoRA adapter (peft) instead of all weights; the adapter is saved to
    ``<out>/adapter`` and merged in float32 into ``<out>``, checked against the trained model."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target: str = "all-linear"
    seed: int = 0
    save_steps: int | None = None
    logging_steps: int | None = None
    report_to: str | None = None
    """Metric sinks: ``jsonl`` (default) or ``csv``, plus any transformers integration
    (``tensorboard``, ``wandb`` …), comma-separated; ``none`` for nothing."""
    resume: bool = False
    dtype: str = "float32"
    config_file: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    """``--set key=value`` knobs of TRL's ``SFTConfig``."""
    image_root: Path | None = None
    """Folder of the page images the conversations show, found by file name (VLM models, i.e. a
    model folder with a processor: images stay images)."""
    progress: bool = True
    """TRL's tqdm bars on stderr (``--no-progress`` sets its ``disable_tqdm``)."""
