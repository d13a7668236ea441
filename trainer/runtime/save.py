"""A run's final model on disk, for every trainer: ``save_final`` through a transformers
``Trainer`` (SFT, GRPO: FSDP / ZeRO-3 shards gathered), ``save_lora_final`` for a LoRA run (the
adapter, then the merged float32 model checked by ``ddai.trainer.lora_merge``), ``save_model``
for a bare model and tokenizer (PPO's own loop and its checkpoints). Each file lands by one
rename, so a killed save leaves the previous file or none, never half of one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ddai.pipelines.store import io


def save_lora_final(trainer: Any, cfg: Any, processing_class: Any) -> Any:
    """Save the adapter to ``<out>/adapter`` (``save_final`` gathers FSDP / ZeRO-3 shards), then,
    on the main process, the merged model to ``<out>`` (``lora_merge.merge_lora``: float32, checked
    against the trained model, which an unsharded run holds whole). ``cfg``: a run config with
    ``output_dir``, ``model``, ``dtype``. Collective; the main process returns the ``FinalModel``
    (others None) and raises ``MergeCheckFailed`` once every rank is past the save."""
    from ddai.trainer.lora_merge import MergeCheckFailed, merge_lora, sharded

    adapter = Path(cfg.output_dir) / "adapter"
    save_final(trainer, adapter)
    final = failed = None
    if trainer.accelerator.is_main_process:
        trained = None if sharded(trainer) else trainer.accelerator.unwrap_model(trainer.model)
        try:
            final = merge_lora(
                adapter,
                base=cfg.model,
                dtype=cfg.dtype,
                tokenizer=processing_class,
                out_dir=cfg.output_dir,
                trained=trained,
            )
        except MergeCheckFailed as e:
            failed = e
    trainer.accelerator.wait_for_everyone()
    if failed is not None:
        raise failed
    return final


def save_final(trainer: Any, output_dir: str | os.PathLike[str]) -> None:
    """The final model and tokenizer through ``trainer.save_model`` (which gathers FSDP / ZeRO-3
    shards and writes on the main process only), staged in a temp folder and moved into
    ``output_dir/`` one rename per file. Collective: every rank calls it."""
    import shutil

    out = Path(output_dir)
    stage = out / ".final-stage"
    main = trainer.accelerator.is_main_process
    if main:
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(stage))
    trainer.accelerator.wait_for_everyone()
    if main:
        for f in stage.iterdir():
            if f.is_file() and f.name != "training_args.bin":
                with io.atomic_path(out / f.name) as dst:
                    os.replace(f, dst)
        shutil.rmtree(stage, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()


def save_model(model: Any, tokenizer: Any, output_dir: str | os.PathLike[str]) -> None:
    """Save weights and tokenizer into ``output_dir/`` via a temp folder and one rename per file."""
    import tempfile

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".final-", dir=out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for f in Path(tmp).iterdir():
            if f.is_file():
                with io.atomic_path(out / f.name) as dst:
                    os.replace(f, dst)
