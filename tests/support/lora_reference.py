"""The trained LoRA model, as it was in memory at the end of a run, against the final model the
run wrote to its output folder.

``capture_trained`` spies on ``modeling.changed_parameters`` (GRPO and PPO call it with the
trained model right after training, before anything is saved or merged; ``capture_after_train``
wraps a TRL trainer class's ``train`` instead, for SFT) and keeps a copy of the model's tensors
and its adapter config; ``compare_final`` rebuilds that model on its own
(the run's base weights in float64 plus the captured tensors: no deepcopy, which would keep the
forward TRL patches in, bound to the original model) and compares it with the folder the run
left, in float64 so that only what the files hold can differ.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

PROBE = [
    "<search> capital of France </search> the answer is",
    "which year did the bridge open? <answer> 2021 </answer>",
]


def _keep(seen: dict[str, Any], model: Any) -> None:
    seen["state"] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    seen["config"] = copy.deepcopy(model.peft_config["default"])


def capture_trained(monkeypatch: Any) -> dict[str, Any]:
    """A dict that holds ``state`` (the trained model's tensors, cloned) and ``config`` (its
    adapter's ``LoraConfig``) once the run has trained."""
    from ddai.trainer import modeling

    seen: dict[str, Any] = {}
    real = modeling.changed_parameters

    def spy(before: dict[str, str], model: Any) -> list[str]:
        _keep(seen, model)
        return real(before, model)

    monkeypatch.setattr(modeling, "changed_parameters", spy)
    return seen


def capture_after_train(monkeypatch: Any, trainer_cls: type) -> dict[str, Any]:
    """``capture_trained`` for a run of ``trainer_cls`` (a TRL trainer): the model as its
    ``train`` returns."""
    seen: dict[str, Any] = {}
    real = trainer_cls.train

    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        _keep(seen, self.accelerator.unwrap_model(self.model))
        return out

    monkeypatch.setattr(trainer_cls, "train", train)
    return seen


@dataclass
class Comparison:
    max_abs_diff: float
    """max |Δlogit| of the saved model against the trained one, on the probe's tokens."""
    update_max_abs: float
    """max |Δlogit| of the trained model against its base (adapter off): what training moved."""
    logit_update_error: float
    """‖saved − trained‖ / ‖trained − base‖ over the probe's logits."""
    weight_update_error: float
    """‖(saved W − base W) − ΔW‖ / ‖ΔW‖ over the adapted weights (ΔW: peft's delta)."""


def compare_final(captured: dict[str, Any], base: Path, run_dtype: str, out: Path) -> Comparison:
    """The trained model (base ``base`` loaded in ``run_dtype``, as the run did, plus the captured
    tensors) against ``out``'s model, all in float64."""
    from peft import get_peft_model
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, run_dtype))
    trained = get_peft_model(base_model.double(), copy.deepcopy(captured["config"]))
    state = {k: v.double() if v.is_floating_point() else v for k, v in captured["state"].items()}
    trained.load_state_dict(state, strict=True)
    trained.eval()
    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
    tok = AutoTokenizer.from_pretrained(out)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    batch = tok(PROBE, return_tensors="pt", padding=True)
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        want = trained(**batch).logits[keep]
        with trained.disable_adapter():
            before = trained(**batch).logits[keep]
        got = saved(**batch).logits[keep]
        saved_w = dict(saved.named_parameters())
        err = norm = 0.0
        for name, layer in trained.get_base_model().named_modules():
            if isinstance(layer, LoraLayer):
                delta = layer.get_delta_weight("default")
                moved = saved_w[f"{name}.weight"] - layer.get_base_layer().weight
                err += float((moved - delta).pow(2).sum())
                norm += float(delta.pow(2).sum())
    update = (want - before).norm()
    return Comparison(
        max_abs_diff=float((got - want).abs().max()),
        update_max_abs=float((want - before).abs().max()),
        logit_update_error=float((got - want).norm() / update) if update > 0 else float("inf"),
        weight_update_error=(err / norm) ** 0.5 if norm > 0 else float("inf"),
    )
