"""TRL's GRPO loss driven by hand over rollout trajectories, for the contract tests that prove
state masking (``test_trainer_rollout_mask``, ``test_trainer_vision``): the config, the batch
TRL's ``_compute_loss`` takes, and the gradients with a parameter-dependent term added to the
log-probs of chosen positions. Heavy imports stay inside the functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def mask_segments(ids: Sequence[int], mask: Sequence[int]) -> list[tuple[int, list[int]]]:
    """``ids`` cut into runs of one ``mask`` value, in order: ``[(mask value, ids of the run)]``."""
    segs: list[tuple[int, list[int]]] = []
    for i, m in zip(ids, mask, strict=True):
        if not segs or segs[-1][0] != m:
            segs.append((m, []))
        segs[-1][1].append(i)
    return segs


def grpo_args(output_dir: str) -> Any:
    """A ``GRPOConfig`` for one group of 2 on CPU in fp32: sequence-level importance sampling,
    the ``grpo`` loss, no KL term, no reporting."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        importance_sampling_level="sequence",
        loss_type="grpo",
        beta=0.0,
        report_to=[],
    )


def loss_inputs(trajs: Sequence[Any], pad_token_id: int) -> dict[str, Any]:
    """The batch TRL's ``_compute_loss`` takes for two trajectories (advantages +1 and -1):
    prompts left-padded, completions right-padded, ``tool_mask`` = ``env_mask`` (padding 1), all
    ``(2, length)``."""
    import torch
    from trl.trainer.utils import pad

    comp = [torch.tensor(t.completion_ids) for t in trajs]
    return {
        "prompt_ids": pad([torch.tensor(t.prompt_ids) for t in trajs], pad_token_id, "left"),
        "prompt_mask": pad(
            [torch.ones(len(t.prompt_ids), dtype=torch.long) for t in trajs], 0, "left"
        ),
        "completion_ids": pad(comp, pad_token_id, "right"),
        "completion_mask": pad([torch.ones_like(c) for c in comp], 0, "right"),
        "tool_mask": pad([torch.tensor(t.env_mask) for t in trajs], 1, "right"),
        "advantages": torch.tensor([1.0, -1.0]),
    }


def loss_grads(
    trainer: Any,
    model: Any,
    inputs: dict[str, Any],
    where: Any | None,
    on_call: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Each parameter's gradient of TRL's loss over ``inputs``, with ``3 * where * sum(anchor) *
    ramp`` added to the per-token log-probs (``where``: ``(B, T)`` weights, None for the plain
    loss). ``anchor`` is the model's first parameter, so where ``where`` reaches the loss the
    gradients change. ``on_call`` sees the keywords of each log-prob pass."""
    import torch

    original = trainer._get_per_token_logps_and_entropies
    anchor = next(model.parameters())

    def perturbed(*a: Any, **kw: Any) -> Any:
        if on_call is not None:
            on_call(kw)
        logps, ent, aux = original(*a, **kw)
        ramp = torch.linspace(0.5, 1.5, logps.shape[1])
        return logps + 3.0 * where * anchor.sum() * ramp, ent, aux

    trainer._get_per_token_logps_and_entropies = perturbed if where is not None else original
    try:
        model.zero_grad()
        trainer._compute_loss(model, dict(inputs)).backward()
    finally:
        trainer._get_per_token_logps_and_entropies = original
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
