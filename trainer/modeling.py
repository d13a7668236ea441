"""Loading a policy: one ``from_pretrained`` path for tiny test models and real checkpoints.

A local folder or a hub id both go through ``transformers``' ``Auto*`` classes; with
``HF_HUB_OFFLINE=1`` (set by the CLI unless the user overrides it) a hub id resolves only from the
local cache, so nothing is downloaded behind the user's back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")


@contextlib.contextmanager
def found_model(name_or_path: str) -> Iterator[None]:
    """Within the block, a model ``transformers`` cannot find (``OSError``: no such folder, a
    folder without ``config.json``, a hub id not in the local cache while offline) is bad input
    (``ValueError``, the CLI's exit 2) naming it and the fix, not a traceback."""
    try:
        yield
    except OSError as e:
        if Path(name_or_path).exists():
            where = "not a model folder (config.json and weights)"
        elif name_or_path[:1] in "/.~" or name_or_path.count("/") > 1:
            where = "no such folder"
        else:  # ``name`` or ``namespace/name``: a folder, or a hub id
            where = "no such folder, nor a hub id in the local cache"
            if _offline():
                where += " (HF_HUB_OFFLINE=1: nothing is downloaded)"
        raise ValueError(
            f"model {name_or_path!r}: {where}. Pass a folder written by save_pretrained "
            f"(`ddai model tiny OUT` builds a tiny one) or a cached hub id. ({e})"
        ) from e


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer, with a pad token (the eos token when it has none)."""
    from transformers import AutoTokenizer

    with found_model(name_or_path):
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
        raise ValueError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    with found_model(name_or_path):
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    return model, load_tokenizer(name_or_path)


def tensor_digest(t: Any) -> str:
    """A blake2b digest of a tensor's bytes (a DTensor's full value, collective under FSDP2).
    Copies one tensor at a time to the CPU, never the model."""
    import hashlib

    import torch

    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    data = full.detach().contiguous().cpu().reshape(-1)
    if data.dtype == torch.bool:
        data = data.to(torch.uint8)
    return hashlib.blake2b(data.view(torch.uint8).numpy().tobytes(), digest_size=16).hexdigest()


def parameter_snapshot(model: Any, *, trainable_only: bool = True) -> dict[str, str]:
    """A digest per parameter (``tensor_digest``): enough to tell which ones training changed
    without cloning the model (a 7B policy's copy would need another 15-30 GB). With LoRA only the
    adapter's weights are trainable, so only they are hashed by default."""
    return {
        n: tensor_digest(p)
        for n, p in model.named_parameters()
        if p.requires_grad or not trainable_only
    }


def changed_parameters(before: dict[str, str], model: Any) -> list[str]:
    """Names of the parameters whose digest differs from ``before`` (collective under FSDP2: every
    rank calls it)."""
    now = dict(model.named_parameters())
    return [n for n, d in before.items() if n in now and tensor_digest(now[n]) != d]


# Half-precision weights are updated in place: an AdamW step moves each weight by about ``lr``, and
# when ``lr`` is under half the spacing of representable values around the weight, the update
# rounds away. Refuse a run that would lose most of its updates.
LOST_UPDATE_LIMIT = 0.5


def lost_update_share(model: Any, lr: float, *, sample: int = 1 << 20) -> float:
    """Share of the trainable half-precision weights that a step of size ``lr`` cannot change:
    ``lr < ulp(w) / 2`` with ``ulp(w) = 2**floor(log2|w|) * eps(dtype)``. Float32 weights count as
    movable. Up to ``sample`` evenly strided values per tensor are inspected."""
    import torch

    lost = total = 0
    for p in model.parameters():
        if not p.requires_grad or p.numel() == 0:
            continue
        step = max(1, p.numel() // sample)
        total += -(-p.numel() // step)  # the strided sample's size
        if p.dtype not in (torch.bfloat16, torch.float16):
            continue
        w = p.detach().reshape(-1)[::step]
        mant, exp = torch.frexp(w.float().abs())  # |w| = mant * 2**exp, mant in [0.5, 1)
        ulp = torch.ldexp(torch.ones_like(mant), exp - 1) * torch.finfo(p.dtype).eps
        lost += int(((ulp / 2 > lr) & (w != 0)).sum())
    return lost / total if total else 0.0


def check_update_precision(model: Any, lr: float, *, flag: str = "--lr") -> float:
    """Raise ``TrainConfigError`` when most trainable weights are in half precision and too large for
    a step of ``lr`` to change (pure bf16 at DDAI's lr 1e-6); return the lost share otherwise.

    With LoRA the trainable weights are the adapter's (float32 after ``float32_adapter``: nothing
    lost); the merge into the frozen weights is the other place an update can round away, and
    ``ddai.trainer.lora_merge`` measures it and saves the merge in float32."""
    from ddai.trainer.common import TrainConfigError

    share = lost_update_share(model, lr)
    if share > LOST_UPDATE_LIMIT:
        raise TrainConfigError(
            f"{flag} {lr:g}: {share:.0%} of the trainable half-precision weights are too large for "
            "a step this small to change (bfloat16 keeps 8 significant bits; the update rounds "
            "away). Train a LoRA adapter (--lora: float32 adapter on half-precision weights), or "
            "keep float32 weights (--dtype float32; a GPU still computes in bf16 autocast), or "
            "raise the learning rate"
        )
    return share


def float32_adapter(model: Any) -> int:
    """Cast the trainable half-precision parameters of ``model`` (a peft model: its adapter) to
    float32 in place; return how many were cast. Call it before the optimizer is built.

    peft upcasts a LoRA adapter to float32 by default, but TRL's trainers pass
    ``autocast_adapter_dtype=False`` under DeepSpeed ZeRO-3 (non-quantized models: DeepSpeed
    0.19.2 could not all-gather mixed dtypes, deepspeed#8072), which leaves the adapter in the
    base weights' bfloat16: then an adapter weight of 0.1 cannot move by 1e-6. Casting it back
    gives the same float32 adapter under every accelerate config (DeepSpeed's bf16 optimizer keeps
    float32 master weights of it too). DeepSpeed 0.19.2 itself is refused when something was cast:
    it fails on the first step with a mixed-dtype all-gather (fixed by deepspeed#8073)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    from ddai.trainer.common import TrainConfigError

    cast = 0
    for p in model.parameters():
        if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
            p.data = p.data.float()
            cast += 1
    if cast:
        try:
            deepspeed = version("deepspeed")
        except PackageNotFoundError:
            deepspeed = None
        if deepspeed == BROKEN_MIXED_DTYPE_DEEPSPEED:
            raise TrainConfigError(
                f"--lora under ZeRO-3 with deepspeed {deepspeed}: this release cannot all-gather "
                "a float32 adapter beside half-precision weights (deepspeed#8072); install "
                "another deepspeed release (the fix is deepspeed#8073)"
            )
    return cast


BROKEN_MIXED_DTYPE_DEEPSPEED = "0.19.2"
"""The DeepSpeed release whose ZeRO-3 all-gather fails on mixed parameter dtypes."""


def lora_config(*, r: int, alpha: int, dropout: float, target: str) -> Any:
    """peft's ``LoraConfig`` for a causal LM (``target``: peft's module syntax, e.g. all-linear)."""
    from peft import LoraConfig

    return LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target, task_type="CAUSAL_LM"
    )


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
        raise ValueError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    with found_model(name_or_path):
        processor = load_processor(name_or_path)
    if processor is None:
        raise ValueError(f"{name_or_path}: no image processor; not a vision-language model")
    if processor.tokenizer.pad_token is None:
        processor.tokenizer.pad_token = processor.tokenizer.eos_token
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    with found_model(name_or_path):
        model = AutoModelForImageTextToText.from_pretrained(name_or_path, dtype=torch_dtype)
    return model, processor


class AdapterDisabled:
    """A peft model called with its adapters disabled: the frozen base as a reference policy
    without a second copy of the weights. Callable like the model (forward only)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(*args, **kwargs)
