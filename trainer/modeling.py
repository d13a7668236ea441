"""Loading a policy: one ``from_pretrained`` path for tiny test models and real checkpoints.

A local folder or a hub id both go through ``transformers``' ``Auto*`` classes; with
``HF_HUB_OFFLINE=1`` (set by the CLI unless the user overrides it) a hub id resolves only from the
local cache, so nothing is downloaded behind the user's back.
"""

from __future__ import annotations

import os
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
