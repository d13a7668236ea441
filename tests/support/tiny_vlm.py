"""A tiny Qwen2-VL for tests: built from a config, nothing downloaded (test scaffolding: the
package needs none of it).

``tiny_vlm()`` builds it in memory; ``build_tiny_vlm(out)`` writes a ``from_pretrained`` folder: a randomly initialised
``Qwen2VLForConditionalGeneration`` (two text layers, one vision block), the byte-level BPE
tokenizer of ``ddai.trainer.tiny`` plus Qwen2-VL's vision tokens, Qwen2-VL's PIL image processor
(no torchvision needed) and Qwen2.5-VL's chat template as TRL ships it, so TRL's training-template
patch for assistant-only loss applies exactly as it does to a real checkpoint. Pages of
``28·2k`` pixels per side become ``k×k`` image placeholder tokens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ddai.pipelines.store import io

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def qwen2_vl_chat_template() -> str:
    """Qwen2.5-VL's chat template (Qwen2-VL's, with the image and video counters), as in TRL."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5_vl.jinja").read_text("utf-8")


def tiny_vlm(
    *,
    texts: Iterable[str] | None = None,
    max_pixels: int = 28 * 28 * 16,
    seed: int = 0,
    chat_template: str | None = None,
) -> tuple[Any, Any, Any]:
    """A tiny Qwen2-VL in memory: ``(model, tokenizer, processor)``.

    ``max_pixels`` caps the resized image (default: at most 16 placeholder tokens per image);
    ``chat_template``: the tokenizer's and processor's (default: Qwen2.5-VL's, as TRL ships it).
    """
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from ddai.trainer.modeling import image_only_processor_class
    from ddai.trainer.tiny import FIXTURE_TEXT, train_tokenizer

    tok = train_tokenizer([FIXTURE_TEXT, *(texts or [])])
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *VISION_TOKENS]})
    template = chat_template if chat_template is not None else qwen2_vl_chat_template()
    tok.chat_template = template
    images = Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=max_pixels)
    processor = image_only_processor_class(Qwen2VLProcessor)(images, tok, chat_template=template)
    ids = dict(zip(VISION_TOKENS, tok.convert_tokens_to_ids(list(VISION_TOKENS)), strict=True))
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "mrope_section": [2, 1, 1],
            },
            "pad_token_id": tok.pad_token_id,
            "eos_token_id": tok.eos_token_id,
            "bos_token_id": None,
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok, processor


def build_tiny_vlm(
    out: str | os.PathLike[str],
    *,
    texts: Iterable[str] | None = None,
    max_pixels: int = 28 * 28 * 16,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Write ``tiny_vlm``'s model, tokenizer and image processor to ``out``."""
    path = Path(out)
    if path.exists() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(f"{path} is not empty; pick a new folder or pass overwrite")
    model, _, processor = tiny_vlm(texts=texts, max_pixels=max_pixels, seed=seed)
    with io.atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    return path
