"""The final model of a LoRA run: the adapter merged in float32, checked against the trained model.

peft's ``merge_and_unload`` adds ``B @ A * scale`` into the base weights in their own dtype. At
DDAI's lr 1e-6 that update is under half a bfloat16 spacing for almost every weight, so a merge
into bfloat16 weights rounds ~99% of it away, and the merged folder is what every later command
loads. ``merge_lora`` instead

1. rebuilds the trained model on the CPU: the base loaded as the run loaded it (its dtype), each
   weight then upcast to float32 (exact), plus the saved adapter; when the run's model is at hand
   (unsharded runs) every tensor is checked equal to it, so what follows is about the in-memory
   model and not a look-alike;
2. measures, per adapted weight, what a save would keep of the update ``ΔW`` in the run's dtype
   and in float32 (``UpdateSurvival``, exact casts in float64);
3. merges with peft on the float32 copy and saves the merged weights in float32 (in the run's
   dtype only when that is float32 already: a half-precision save would lose the update, and
   whether it loses "enough to matter" is not ours to guess; the summary says what it would have
   kept);
4. reloads the saved folder and compares its logits on a probe batch with the rebuilt trained
   model's, in float32 arithmetic: max |Δlogit| must be within ``LOGIT_TOLERANCE``.

A failed check, or a float32 merge that would itself keep under half of the update (``lr`` far
below float32's spacing), writes no merged weights: the adapter in ``<out>/adapter`` stays the
final model and ``MergeCheckFailed`` says why (the CLI exits 1). ``FinalModel`` is what the
summaries of ``train sft|grpo|ppo`` report.

Memory: the rebuild is one float32 copy of the model on the CPU (the base is read once in the
run's dtype first), then the reloaded folder; about 2 × 4 bytes per parameter at the peak.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOGIT_TOLERANCE = 1e-3
"""max |Δlogit| allowed between the saved merged model and the trained adapter model."""

PROBE_TEXTS = (
    "<search> which bridge opened in 2021 </search>",
    "<information> page 3: the report lists revenue by year </information> <answer> 2019",
)
"""The probe batch the check runs (any text the tokenizer reads; images play no part)."""


class MergeCheckFailed(RuntimeError):
    """The merged model does not reproduce the trained adapter model; nothing merged was written."""


@dataclass
class FinalModel:
    """What a training run left as its final model in ``--out-dir``."""

    artifact: str
    """``merged`` (a LoRA adapter merged into the base weights; the adapter is in
    ``<out>/adapter``) or ``full`` (every weight trained)."""
    dtype: str
    """The saved weights' dtype, read back from the files."""
    run_dtype: str | None = None
    """LoRA: the base weights' dtype during training."""
    update_weights: int | None = None
    """LoRA: base weights the adapter's update ``ΔW`` touches (``ΔW != 0``)."""
    changed_weights: int | None = None
    """LoRA: of those, how many differ from the base in the saved file."""
    run_dtype_changed_weights: int | None = None
    """LoRA: how many a merge saved in ``run_dtype`` would change."""
    update_kept: float | None = None
    """LoRA: ``1 − ‖saved − (W + ΔW)‖ / ‖ΔW‖`` over the adapted weights (0 when the rounding error
    is as large as the update)."""
    run_dtype_update_kept: float | None = None
    """LoRA: the same for a merge saved in ``run_dtype``."""
    max_abs_logit_diff: float | None = None
    """LoRA: max |Δlogit| of the saved model against the trained adapter model on the probe batch
    (float32 arithmetic)."""
    update_max_abs_logit: float | None = None
    """LoRA: max |Δlogit| of the trained model against its base (adapter disabled) on the same
    batch: how far training moved the logits there, the scale the tolerance is read against."""
    tolerance: float | None = None
    """LoRA: the largest ``max_abs_logit_diff`` the check accepts."""

    def summary(self) -> dict[str, Any]:
        """The fields a summary shows: those that apply (a full model has no merge figures)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class UpdateSurvival:
    """How much of a LoRA update ``ΔW`` a save in one dtype keeps (``update_survival``)."""

    update_weights: int
    """Weights with ``ΔW != 0``."""
    changed_weights: int
    """Weights whose saved value differs from the base ``W``."""
    kept: float
    """``max(0, 1 − ‖cast(W + ΔW) − (W + ΔW)‖ / ‖ΔW‖)``; 1.0 when there is no update."""


def update_survival(pairs: list[tuple[Any, Any]], dtype: Any) -> UpdateSurvival:
    """What a save in ``dtype`` keeps of the updates in ``pairs`` (``(W, ΔW)`` tensors of one
    shape each, any dtype; computed in float64, where ``W + ΔW`` is exact for float32 inputs)."""
    touched = changed = 0
    err2 = norm2 = 0.0
    for w, delta in pairs:
        w, delta = w.detach().double(), delta.detach().double()
        exact = w + delta
        saved = exact.to(dtype).double()
        touched += int((delta != 0).sum())
        changed += int((saved != w).sum())
        err2 += float((saved - exact).pow(2).sum())
        norm2 += float(delta.pow(2).sum())
    kept = 1.0 if norm2 == 0 else max(0.0, 1.0 - (err2 / norm2) ** 0.5)
    return UpdateSurvival(touched, changed, kept)


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


def saved_dtype(folder: str | os.PathLike[str]) -> str:
    """The dtype(s) of the floating tensors in ``folder``'s safetensors files, read from their
    headers (``bfloat16``, ``float32``, or e.g. ``bfloat16+float32``)."""
    from safetensors import safe_open

    found: set[str] = set()
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                found.add(st.get_slice(k).get_dtype())
    names = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
    floats = sorted(names[d] for d in found if d in names)
    if not floats:
        raise FileNotFoundError(f"{folder}: no floating-point weights in a *.safetensors file")
    return "+".join(floats)


def full_model(folder: str | os.PathLike[str]) -> FinalModel:
    """``FinalModel`` of a run that trained every weight and saved them to ``folder``."""
    return FinalModel(artifact="full", dtype=saved_dtype(folder))


def load_base(name_or_path: str, dtype: str) -> Any:
    """The base model as a run loads it: a VLM when the folder has an image processor."""
    from ddai.trainer.modeling import load_policy, load_processor, load_vision_model

    if load_processor(name_or_path) is not None:
        return load_vision_model(name_or_path, dtype=dtype)[0]
    return load_policy(name_or_path, dtype=dtype)[0]


def sharded(trainer: Any) -> bool:
    """True when a trainer's weights are split across ranks (FSDP or DeepSpeed ZeRO-3): no
    process holds the trained model whole."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return bool(trainer.is_fsdp_enabled or is_deepspeed_zero3_enabled())


def check_same_weights(trained: Any, rebuilt: Any) -> None:
    """Raise ``MergeCheckFailed`` unless every tensor of the peft model ``trained`` (the run's,
    any device and dtype) equals ``rebuilt``'s (upcast exactly to its float32)."""
    import torch

    mine = dict(rebuilt.named_parameters())
    theirs = dict(trained.named_parameters())
    if set(mine) != set(theirs):
        odd = sorted(set(mine) ^ set(theirs))[:3]
        raise MergeCheckFailed(f"the reloaded adapter model's parameters differ in name: {odd}")
    for name, p in theirs.items():
        if not torch.equal(p.detach().to("cpu", mine[name].dtype), mine[name].detach()):
            raise MergeCheckFailed(
                f"{name}: the base + saved adapter differ from the trained model's tensor"
            )


def probe_batch(tokenizer: Any) -> dict[str, Any]:
    """``PROBE_TEXTS`` tokenized: ``input_ids`` and ``attention_mask``, ``[2, L]``."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # a VLM's processor holds the tokenizer
    return dict(tok(list(PROBE_TEXTS), return_tensors="pt", padding=True))


def probe_logits(model: Any, batch: dict[str, Any]) -> Any:
    """Logits at the probe's real tokens: ``[n_tokens, V]`` (float32)."""
    import torch

    with torch.no_grad():
        out = model(**batch, use_cache=False).logits
    return out[batch["attention_mask"].bool()].float()


def adapted_pairs(peft_model: Any) -> list[tuple[Any, Any]]:
    """``(W, ΔW)`` of every LoRA-adapted layer: its base weight and peft's delta for it."""
    from peft.tuners.lora import LoraLayer

    pairs = []
    for layer in peft_model.modules():
        if isinstance(layer, LoraLayer):
            for name in layer.active_adapters:
                pairs.append((layer.get_base_layer().weight, layer.get_delta_weight(name)))
    return pairs


def merge_lora(
    adapter_dir: str | os.PathLike[str],
    *,
    base: str,
    dtype: str,
    tokenizer: Any,
    out_dir: str | os.PathLike[str],
    trained: Any | None = None,
    tolerance: float = LOGIT_TOLERANCE,
) -> FinalModel:
    """Merge the adapter saved in ``adapter_dir`` into ``base`` (loaded in ``dtype``, as the run
    did) in float32, save the merged model and ``tokenizer`` to ``out_dir`` and check it (module
    docstring). ``trained``: the run's peft model when it is whole in this process (checked equal
    to the rebuild); None for a sharded run, whose adapter was gathered into ``adapter_dir``.
    Raises ``MergeCheckFailed`` (nothing merged written) when the check fails."""
    import torch
    from peft import PeftModel

    from ddai.pipelines.store import io
    from ddai.trainer.modeling import LOST_UPDATE_LIMIT

    base_model = load_base(base, dtype)
    run_dtype = next(p.dtype for p in base_model.parameters() if p.is_floating_point())
    model = PeftModel.from_pretrained(base_model.float(), str(adapter_dir)).eval()
    if trained is not None:
        check_same_weights(trained, model)
    batch = probe_batch(tokenizer)
    want = probe_logits(model, batch)
    with model.disable_adapter():
        moved = float((want - probe_logits(model, batch)).abs().max())
    pairs = adapted_pairs(model)
    in_run = update_survival(pairs, run_dtype)
    in_fp32 = update_survival(pairs, torch.float32)
    del pairs
    if in_fp32.kept < 1 - LOST_UPDATE_LIMIT:
        raise MergeCheckFailed(
            f"a float32 merge would keep {in_fp32.kept:.1%} of the adapter's update (the step is "
            f"below float32's spacing for the base weights): no merged model written; the final "
            f"model is the adapter in {adapter_dir} on {base}"
        )
    merged = model.merge_and_unload()  # float32 weights plus float32 ΔW, rounded once
    del model
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".final-", dir=out) as tmp:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        cls = type(merged)
        del merged
        reloaded = cls.from_pretrained(tmp, dtype=torch.float32).eval()
        diff = float((probe_logits(reloaded, batch) - want).abs().max())
        del reloaded
        if not diff <= tolerance:
            raise MergeCheckFailed(
                f"the merged model's logits differ from the trained adapter model's by up to "
                f"{diff:.3g} (tolerance {tolerance:g}): no merged model written; the final model "
                f"is the adapter in {adapter_dir} on {base}"
            )
        saved = saved_dtype(tmp)
        for f in Path(tmp).iterdir():
            if f.is_file():
                with io.atomic_path(out / f.name) as dst:
                    os.replace(f, dst)
    return FinalModel(
        artifact="merged",
        dtype=saved,
        run_dtype=dtype_name(run_dtype),
        update_weights=in_fp32.update_weights,
        changed_weights=in_fp32.changed_weights,
        run_dtype_changed_weights=in_run.changed_weights,
        update_kept=in_fp32.kept,
        run_dtype_update_kept=in_run.kept,
        max_abs_logit_diff=diff,
        update_max_abs_logit=moved,
        tolerance=tolerance,
    )
