"""A tiny Qwen2-VL for tests and the demo: built from a config, nothing downloaded.

``tiny_vlm()`` returns a randomly initialised ``Qwen2VLForConditionalGeneration`` and its
processor (a BPE tokenizer trained on fixture text with Qwen2-VL's vision tokens, Qwen2-VL's PIL
image processor, a ChatML template whose user turns may hold typed image/text blocks);
``build_tiny_vlm(out)`` saves both as a ``from_pretrained`` folder that ``load_processor`` and
``ddai train grpo --observation image`` read. Pages are resized to ``image_pixels`` (default
``4 * 28 * 28``: a 4x4 patch grid, 4 image placeholder tokens), so image rollouts stay cheap on CPU.
The processor has no video processor: Qwen2-VL's needs torchvision, which CPU installs lack.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ddai.trainer.tiny import FIXTURE_TEXT, train_tokenizer
from ddai.trainer.vision import image_only

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
# ChatML whose content may be typed blocks; an image is Qwen2-VL's placeholder triple. Assistant
# text is wrapped in generation markers (assistant-only loss).
VLM_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}{% generation %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for c in message['content'] %}"
    "{%- if c['type'] == 'text' %}{{- c['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}"
    "{%- else %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for c in message['content'] %}"
    "{%- if c['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif c['type'] == 'text' %}{{- c['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TINY_IMAGE_PIXELS = 28 * 28 * 4


def tiny_processor(*, image_pixels: int = TINY_IMAGE_PIXELS) -> Any:
    """Qwen2-VL's processor over a fixture-trained tokenizer, without a video processor."""
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tok = train_tokenizer([FIXTURE_TEXT])
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *VISION_TOKENS]})
    tok.chat_template = VLM_TEMPLATE
    images = Qwen2VLImageProcessorPil(min_pixels=image_pixels, max_pixels=image_pixels)
    return image_only(Qwen2VLProcessor)(images, tok, chat_template=VLM_TEMPLATE)


def tiny_vlm(*, seed: int = 0, image_pixels: int = TINY_IMAGE_PIXELS) -> tuple[Any, Any]:
    """``(model, processor)``: a ~60 k-parameter Qwen2-VL (2 text layers of width 32, one vision
    block) and its processor."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    processor = tiny_processor(image_pixels=image_pixels)
    tok = processor.tokenizer
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
    return model, processor


def build_tiny_vlm(
    out: str | os.PathLike[str],
    *,
    seed: int = 0,
    image_pixels: int = TINY_IMAGE_PIXELS,
    overwrite: bool = False,
) -> Path:
    """Save ``tiny_vlm()`` to ``out`` (built beside it and renamed into place)."""
    model, processor = tiny_vlm(seed=seed, image_pixels=image_pixels)
    path = Path(out)
    if path.exists() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(f"{path} is not empty; pick a new folder or pass overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return path
