"""Loading a policy: one ``from_pretrained`` path for tiny test models and real checkpoints.

A local folder or a hub id both go through ``transformers``' ``Auto*`` classes; with
``HF_HUB_OFFLINE=1`` (set by the CLI unless the user overrides it) a hub id resolves only from the
local cache, so nothing is downloaded behind the user's back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer, with a pad token (the eos token when it has none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name_or_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(name_or_path: str, *, dtype: str = "float32") -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a causal LM folder or hub id.

    ``dtype``: ``float32`` (CPU default), ``bfloat16``/``float16`` on accelerators, ``auto`` to keep
    the checkpoint's.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    return model, load_tokenizer(name_or_path)


def parameter_snapshot(model: Any) -> dict[str, Any]:
    """Detached copies of every trainable parameter (to check that training changed them)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def changed_parameters(before: dict[str, Any], model: Any) -> list[str]:
    """Names of the parameters whose values differ from ``before``."""
    import torch

    now = dict(model.named_parameters())
    # FSDP2 parameters are DTensor shards: compare their full values (collective on every rank).
    full = {n: t.full_tensor() if hasattr(t, "full_tensor") else t for n, t in now.items()}
    return [n for n, p in before.items() if n in full and not torch.equal(p, full[n].detach())]


def image_only_processor_class(cls: type) -> type:
    """``cls`` (a VLM processor class such as ``Qwen2VLProcessor``) without its video processor.

    transformers derives a processor's parts from its ``__init__`` signature; this subclass has no
    ``video_processor`` argument, so it builds, saves and loads without torchvision (which video
    processors need). It keeps ``cls``'s name, so a saved folder names the real class.
    """

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        cls.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": __name__})


def load_processor(name_or_path: str) -> Any | None:
    """The VLM processor of a model folder or hub id; None when it has no image processor (a
    text-only model). Without torchvision, a video-capable processor loads image-only."""
    import json

    import transformers
    from transformers import AutoProcessor
    from transformers.utils import cached_file

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    found = cached_file(
        name_or_path,
        "preprocessor_config.json",
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    ) or cached_file(
        name_or_path,
        "processor_config.json",
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    if not found:
        return None
    try:
        processor = AutoProcessor.from_pretrained(name_or_path)
    except (OSError, ImportError, AttributeError, ValueError):
        # Video processors need torchvision; pages are images, so load the processor without one.
        name = json.loads(Path(found).read_text("utf-8")).get("processor_class")
        cls = getattr(transformers, str(name), None)
        if cls is None:
            raise
        processor = image_only_processor_class(cls).from_pretrained(name_or_path)
    if getattr(processor, "image_processor", None) is None:
        return None
    return processor


def load_vision_model(name_or_path: str, *, dtype: str = "float32") -> tuple[Any, Any]:
    """``(model, processor)`` of a VLM folder or hub id (``AutoModelForImageTextToText``)."""
    import torch
    from transformers import AutoModelForImageTextToText

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    processor = load_processor(name_or_path)
    if processor is None:
        raise ValueError(f"{name_or_path}: no image processor; not a vision-language model")
    if processor.tokenizer.pad_token is None:
        processor.tokenizer.pad_token = processor.tokenizer.eos_token
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForImageTextToText.from_pretrained(name_or_path, dtype=torch_dtype)
    return model, processor
