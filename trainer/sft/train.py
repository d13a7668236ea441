"""``ddai train sft``: TRL's ``SFTTrainer`` on Searcher conversations, assistant turns only.

Input: ``ddai distill`` output or DDAI ``train1`` files (Parquet or JSONL with a ``messages``
column: a list of ``{role, content}`` or its JSON text). Observation turns (``user`` messages after
the question, DDAI's ``[{"image": path}]`` or error strings) are masked out of the loss by the chat
template's generation markers; only the Searcher's own turns are learned.

A text model reads image observations as ``[image: path]`` text. A model with a processor (a VLM
such as Qwen2-VL) sees them as images: the files, found by name under ``--image-root``, go through
TRL's vision-language SFT path (``ddai.trainer.sft.images``); their image tokens carry no loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.trainer import common
from ddai.trainer.episode.chat import ensure_training_template
from ddai.trainer.runtime import dist
from ddai.trainer.runtime.save import save_final, save_lora_final
from ddai.trainer.sft import fit
from ddai.trainer.sft.config import SFTRunConfig
from ddai.trainer.sft.conversations import load_conversations, read_rows
from ddai.trainer.sft.images import (
    ImageConversation,
    MissingImage,
    image_conversation,
    vision_dataset,
)


@dataclass
class SFTResult:
    output_dir: str
    rows: int
    dropped: dict[str, int]
    steps: int
    train_loss: float | None
    changed_parameters: int
    lora: bool
    final_model: dict[str, Any] | None = None
    """What ``output_dir`` holds (``lora_merge.FinalModel.summary``); None on ranks but the main."""
    images: int = 0
    """Images the training rows show (0 for a text model)."""
    image_turns_flattened: int = 0
    """Turns (messages) whose images a text model read as ``[image: path]`` text, never as
    pixels (a VLM model folder with a processor keeps them images)."""
    cut_at_max_length: int | None = None
    """Rows longer than ``max_length`` (their later turns untrained); None when not counted (a
    VLM, packing, or no ``max_length``)."""


def load_image_conversations(
    paths: list[Path], image_root: Path | None
) -> tuple[list[ImageConversation], dict[str, int]]:
    """Conversations that keep their images (VLM SFT), with drop counts by reason.

    A row whose image is not under ``image_root`` is dropped and counted; when no row is left the
    error names ``--image-root`` and the first missing image.
    """
    convs: list[ImageConversation] = []
    dropped: dict[str, int] = {}
    first_missing = None
    for row in read_rows(paths):
        try:
            conv = image_conversation(row["messages"], image_root)
        except MissingImage as e:
            first_missing = first_missing or str(e)
            dropped["image not under --image-root"] = (
                dropped.get("image not under --image-root", 0) + 1
            )
            continue
        except (ValueError, KeyError, TypeError, AttributeError):
            dropped["unreadable messages"] = dropped.get("unreadable messages", 0) + 1
            continue
        if not any(m["role"] == "assistant" for m in conv.messages):
            dropped["no assistant turn"] = dropped.get("no assistant turn", 0) + 1
            continue
        convs.append(conv)
    if not convs:
        hint = f" ({first_missing}); point --image-root at the page images" if first_missing else ""
        raise common.TrainConfigError(
            f"--data: no usable conversation in {[str(p) for p in paths]}{hint}"
        )
    return convs, dropped


def sft_args(cfg: SFTRunConfig) -> Any:
    """TRL ``SFTConfig`` from defaults < config file < flags < ``--set``."""
    from trl import SFTConfig

    file_layer, overrides = common.user_layers(SFTConfig, cfg)
    flags = {
        "num_train_epochs": cfg.epochs,
        "max_steps": cfg.max_steps,
        "learning_rate": cfg.learning_rate,
        "per_device_train_batch_size": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "max_length": cfg.max_length,
        "save_steps": cfg.save_steps,
        "logging_steps": cfg.logging_steps,
        "report_to": cfg.report_to,
    }
    defaults = {
        "learning_rate": 1e-5,
        "per_device_train_batch_size": 4,
        "max_length": 2048,
        "logging_steps": 10,
        "save_steps": 500,
        "save_strategy": "steps",
        "save_total_limit": 2,
        "disable_tqdm": not cfg.progress,
        "packing": False,
        # TRL's SFT default (recompute activations in the backward pass) under transformers' new
        # name: TRL's `gradient_checkpointing=True` made transformers warn on every run.
        "activation_checkpointing": True,
        **common.device_defaults(),
    }
    merged = common.merge_layers(defaults, file_layer, flags, overrides)
    common.checkpointing_name(merged, {**file_layer, **overrides})
    return common.trl_config(SFTConfig, merged, cfg, assistant_only_loss=cfg.assistant_only_loss)


@dataclass
class SFTSetup:
    """A ready ``SFTTrainer`` and what ``run_sft`` reports about its data."""

    trainer: Any
    processing_class: Any
    """The tokenizer, or the processor of a VLM."""
    rows: int
    dropped: dict[str, int]
    images: int
    before: dict[str, Any]
    """The starting trainable weights (``parameter_snapshot``; with LoRA the adapter's)."""
    cut: int | None = None
    """Rows longer than ``max_length`` (``fit.cut_count``), None when not counted."""
    flattened: int = 0
    """Turns whose images became ``[image: path]`` text (a text model)."""


def build_sft(cfg: SFTRunConfig) -> SFTSetup:
    """Load the data and the model and build TRL's ``SFTTrainer`` (a VLM's processor when the
    model has one: images stay images)."""
    from datasets import Dataset
    from trl import SFTTrainer

    from ddai.trainer.modeling import (
        check_update_precision,
        float32_adapter,
        load_policy,
        load_processor,
        load_vision_model,
        lora_config,
        parameter_snapshot,
    )
    from ddai.trainer.runtime.metrics_file import build_callbacks

    args = sft_args(cfg)
    dist.allow_fsdp_on_cpu(args)
    dist.end_group_at_exit()
    n_images = flattened = 0
    if load_processor(cfg.model) is not None:
        # A VLM: TRL's vision path; TRL patches the processor's template for assistant-only loss.
        image_convs, dropped = load_image_conversations(cfg.data, cfg.image_root)
        convs = None  # lengths are not counted: images expand to model-specific token counts
        model, tok = load_vision_model(cfg.model, dtype=cfg.dtype)
        train_dataset = vision_dataset(image_convs)
        n_rows, n_images = len(image_convs), sum(len(c.images) for c in image_convs)
    else:
        convs, dropped, flattened = load_conversations(cfg.data)
        model, tok = load_policy(cfg.model, dtype=cfg.dtype)
        if cfg.assistant_only_loss:
            ensure_training_template(tok)
        train_dataset = Dataset.from_list([{"messages": c} for c in convs])
        n_rows = len(convs)
    peft_config = None
    if cfg.lora:
        peft_config = lora_config(
            r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target=cfg.lora_target
        )
    _, metrics_file = common.split_report_to(cfg.report_to)
    out_existed = Path(cfg.output_dir).exists()
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        processing_class=tok,
        peft_config=peft_config,
        callbacks=build_callbacks(cfg.output_dir, metrics_file, progress=cfg.progress),
    )
    common.finish_trainer_setup(trainer)
    if cfg.lora:
        float32_adapter(trainer.model)  # TRL leaves it in the weights' dtype under ZeRO-3
        check_update_precision(trainer.model, args.learning_rate)
    before = parameter_snapshot(trainer.model)
    cut = None
    if args.max_length is not None and not args.packing:
        # TRL truncated every row to max_length and dropped those left with no trained token
        kept = len(trainer.train_dataset)
        try:
            fit.check_kept(n_rows, kept, args.max_length, cfg.data, dropped)
        except common.TrainConfigError:
            if not out_existed:  # the trainer made the folder: leave nothing behind
                fit.remove_if_empty(Path(cfg.output_dir))
            raise
        if convs is not None:
            # the dropped rows are longer too; count the trained ones that lose their tail
            cut = fit.cut_count(tok, convs, args.max_length) - (n_rows - kept)
            fit.warn_cut(cut, kept, args.max_length)
        n_rows = kept
    return SFTSetup(trainer, tok, n_rows, dropped, n_images, before, cut, flattened)


def run_sft(cfg: SFTRunConfig) -> SFTResult:
    """Train, save the final (merged) model and tokenizer to ``output_dir``, return a summary."""
    from ddai.trainer.lora_merge import full_model
    from ddai.trainer.modeling import changed_parameters

    cfg.check_lora()
    common.hf_progress(cfg.progress)
    resume_from = common.resume_checkpoint(cfg.output_dir, cfg.resume)
    setup = build_sft(cfg)
    trainer = setup.trainer
    out = trainer.train(resume_from_checkpoint=resume_from)
    changed = len(changed_parameters(setup.before, trainer.model))  # collective under FSDP
    if cfg.lora:
        final = save_lora_final(trainer, cfg, setup.processing_class)
    else:
        save_final(trainer, cfg.output_dir)
        final = full_model(cfg.output_dir) if trainer.accelerator.is_main_process else None
    return SFTResult(
        output_dir=str(cfg.output_dir),
        rows=setup.rows,
        dropped=setup.dropped,
        steps=int(trainer.state.global_step),
        train_loss=float(out.training_loss) if out.training_loss is not None else None,
        changed_parameters=changed,
        lora=cfg.lora,
        final_model=final.summary() if final else None,
        images=setup.images,
        image_turns_flattened=setup.flattened,
        cut_at_max_length=setup.cut,
    )
