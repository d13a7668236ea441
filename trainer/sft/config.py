"""``ddai train sft``'s run config: its fields are the command's flags, read by ``--help`` without
importing the trainer (``trainer/sft/train.py``, which re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddai.trainer.run_settings import PolicyRun, TrlKnobs


@dataclass
class SFTRunConfig(TrlKnobs, PolicyRun):
    """One SFT run; every field has a flag in ``ddai train sft`` (the policy, its LoRA and TRL's
    run knobs from ``ddai.trainer.run_settings``)."""

    data: list[Path]
    """``ddai distill`` output or DDAI train1 file(s) (Parquet/JSONL, a ``messages`` column);
    repeatable."""
    epochs: float | None = None
    """Training epochs."""
    batch_size: int | None = None
    """Conversations per device step."""
    grad_accum: int | None = None
    """Gradient accumulation steps."""
    max_length: int | None = None
    """Truncate conversations to this many tokens."""
    assistant_only_loss: bool = True
    """Loss on the Searcher's turns only (observations and the prompt masked)."""
    lora_dropout: float = 0.05
    image_root: Path | None = None
    """Folder of the page images the conversations show, found by file name (VLM models, i.e. a
    model folder with a processor: images stay images)."""
    progress: bool = True
    """TRL's tqdm bars on stderr (``--no-progress`` sets its ``disable_tqdm``)."""
