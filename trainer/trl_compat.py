"""The one fence around TRL's private API: everything ddai touches in ``GRPOTrainer`` that is not
public lives here, and ``check_trl_internals`` checks it against the installed TRL.

- ``grpo_trainer_class``: ``DdaiGRPOTrainer``, overriding two private ``GRPOTrainer`` methods
  (``_generate_and_score_completions``: hands the rollout its batch through the ``ddai_inputs``
  side channel and logs the scored rollouts; ``_get_per_token_logps_and_entropies``: scores the
  rollouts under the sampler's own processors when it applies more than a temperature
  (``processed_logps``: TRL's fused head divides by the temperature only, which would make a run
  with a repetition penalty or top-p silently off-policy), and feeds the rollouts' images into
  every log-prob pass; ``_compute_loss``: TRL's loss, then the clip's record of the mini-batch,
  ``ClipStats``, read from the loss pass's log-probs and TRL's logged clipped share). The loss
  pass of a text policy scores the policy tokens only (``policy_logps``): observation tokens,
  masked out of the loss by ``env_mask``, go through the backbone as context but not through the
  LM head (TRL's fused head is handed labels of -100 there and, on the CPU too, projects only the
  kept positions, ``compact_fused_head``); so do the old and reference passes TRL runs while it
  scores a generated batch (``scoring_keep``: the rollouts' ``env_mask``). Their log-probs and
  entropies are 0 in every pass, so the ratios TRL forms there stay finite. The class is built,
  and TRL checked, on first use.
- ``rollout_inputs`` and ``generation_model``: what the rollout function reads from the trainer
  (the side channel, the group size, TRL's generation context with its private ``_dist``).
  The fence imports nothing of the episode layer (``trainer/episode``): the trainer is handed its
  rollout (``ddai_rollout``, a ``SearchRollout``) and asks it for the episode layer's pieces
  (``take_rows``, ``vision_chunk``, ``teacher_forced_logprobs``), so the episode layer may import
  the fence and not the other way round.
- ``GRPO_LOSS_TYPES`` and ``RATIO_LEVELS``: the ``loss_type`` and ``importance_sampling_level``
  values ddai accepts; TRL names its own only in ``GRPOConfig``'s help (``trl_choices``) and
  rejects others only inside its loss, so the check holds the two lists equal.
- ``unwrap_model_for_generation`` and ``disable_dropout``: the two helpers of TRL's non-top-level
  modules the other trainers use (PPO's sampling, GRPO's preflight; PPO's dropout off). Every
  other ``trl`` import in ddai is a name of TRL's public top level (``tests/test_architecture.py``
  checks it).

Longer than 400 lines because it is the one fence: splitting it would make two places that reach
into TRL's private API.

``pyproject.toml`` pins ``trl`` to the minor range these were tested with. When TRL changes any
of them, ``check_trl_internals`` names what changed instead of letting a run fail deep inside a
training step (the contract tests ``tests/trainer/test_trl_compat.py``,
``test_trainer_rollout_mask.py`` and ``test_trainer_vision.py`` run them).
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Iterator
from typing import Any

from ddai.trainer.runtime import dist
from ddai.trainer.runtime.clip_stats import CLIP_LOSSES, ClipStats
from ddai.trainer.runtime.zero_variance import ZeroVarianceSteps

TESTED_TRL = ">=1.16,<1.17"
"""The ``trl`` range in ``pyproject.toml``."""

# Method -> the leading parameters (names and order) the override and its callers use.
GRPO_METHODS: dict[str, tuple[str, ...]] = {
    "_generate_and_score_completions": ("self", "inputs"),
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
    ),
    "_compute_loss": ("self", "model", "inputs"),
}
# Text ``_compute_loss`` must hold: the clipped share ``ClipStats`` reads after each loss.
CLIP_METRIC = 'self._metrics[mode]["clip_ratio/region_mean"]'

# Text TRL's fused LM head must hold: where it decides to project only the kept positions (on
# Triton devices) or every position (elsewhere); ``compact_fused_head`` widens it to the CPU.
COMPACT_SOURCE = "compact = _use_triton(hidden_states.device)"

# ``GRPOConfig`` knobs TRL takes as any string and checks only inside its loss, a whole step into
# a run: the values ddai accepts (``grpo.config.grpo_args`` refuses others up front), each set
# equal to the values TRL's help for the field names (``trl_choices``).
GRPO_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
RATIO_LEVELS = ("token", "sequence")
CHOICES = {"loss_type": GRPO_LOSS_TYPES, "importance_sampling_level": RATIO_LEVELS}
CHOICE_NAMES = {"loss_type": "GRPO_LOSS_TYPES", "importance_sampling_level": "RATIO_LEVELS"}

# Attributes of a built GRPOTrainer the rollout reads: name -> why.
GRPO_ATTRIBUTES = {
    "rollout_func": "GRPOTrainer(rollout_func=…) drives the multi-turn episodes",
}


class TRLInternalsChanged(RuntimeError):
    """The installed TRL no longer matches what ``DdaiGRPOTrainer`` overrides."""


def _problems(grpo_cls: Any) -> list[str]:
    out = []
    for name, want in GRPO_METHODS.items():
        fn = getattr(grpo_cls, name, None)
        if fn is None:
            out.append(f"GRPOTrainer.{name} is gone")
            continue
        got = tuple(inspect.signature(fn).parameters)[: len(want)]
        if got != want:
            out.append(f"GRPOTrainer.{name}{got} no longer starts with {want}")
    init = inspect.signature(grpo_cls.__init__).parameters
    for name, why in GRPO_ATTRIBUTES.items():
        if name not in init:
            out.append(f"GRPOTrainer.__init__ has no `{name}` ({why})")
    try:
        from trl.distributed import DistributedBackend
        from trl.models import unwrap_model_for_generation
        from trl.trainer.utils import disable_dropout_in_model  # noqa: F401
    except ImportError as e:
        out.append(f"TRL helper import failed: {e}")
    else:
        if (
            "gather_deepspeed3_params"
            not in inspect.signature(unwrap_model_for_generation).parameters
        ):
            out.append("trl.models.unwrap_model_for_generation lost gather_deepspeed3_params")
        if not hasattr(DistributedBackend, "summon_full_params"):
            out.append("trl.distributed.DistributedBackend.summon_full_params is gone")
    if "self._dist =" not in inspect.getsource(grpo_cls.__init__):
        out.append("GRPOTrainer.__init__ no longer sets self._dist (a DistributedBackend)")
    import trl.trainer.utils as trl_utils

    if not callable(getattr(trl_utils, "_use_triton", None)) or COMPACT_SOURCE not in (
        inspect.getsource(trl_utils.add_fused_lm_head)
    ):
        out.append(f"trl.trainer.utils.add_fused_lm_head no longer holds `{COMPACT_SOURCE}`")
    loss = getattr(grpo_cls, "_compute_loss", None)
    if loss is not None and CLIP_METRIC not in inspect.getsource(loss):
        out.append(f"GRPOTrainer._compute_loss no longer logs {CLIP_METRIC}")
    return out


def trl_choices(config_cls: Any, name: str) -> set[str]:
    """The values TRL's help for ``config_cls.<name>`` names: the quoted names of its first
    sentence that quotes any ("Supported values are 'grpo', 'dr_grpo', ..."; "at the `'token'`
    or `'sequence'` level"). TRL keeps no public list of them."""
    text = config_cls.__dataclass_fields__[name].metadata.get("help", "")
    for sentence in re.split(r"\.\s", text):
        if names := re.findall(r"'(\w+)'", sentence):
            return set(names)
    return set()


def _choice_problems(config_cls: Any) -> list[str]:
    out = []
    for name, ours in CHOICES.items():
        trls = trl_choices(config_cls, name)
        if trls != set(ours):
            out.append(
                f"GRPOConfig.{name} now names {sorted(trls)} (ddai's {CHOICE_NAMES[name]}: "
                f"{list(ours)}; TRL adds {sorted(trls - set(ours))}, drops "
                f"{sorted(set(ours) - trls)})"
            )
    return out


def check_trl_internals(grpo_cls: Any | None = None, config_cls: Any | None = None) -> None:
    """Raise ``TRLInternalsChanged`` naming every TRL internal that changed (``config_cls``:
    TRL's ``GRPOConfig`` unless given)."""
    import trl

    if grpo_cls is None:
        from trl import GRPOTrainer as grpo_cls
    if config_cls is None:
        from trl import GRPOConfig as config_cls
    problems = _problems(grpo_cls) + _choice_problems(config_cls)
    if problems:
        raise TRLInternalsChanged(
            f"trl {trl.__version__} changed internals ddai's GRPO trainer overrides "
            f"(tested with trl{TESTED_TRL}): " + "; ".join(problems) + ". Install a tested "
            f"version (pip install 'trl{TESTED_TRL}') or update ddai/trainer/trl_compat.py."
        )


def rollout_inputs(trainer: Any) -> tuple[list[dict[str, Any]], int]:
    """The batch's task rows (the ``ddai_inputs`` side channel ``DdaiGRPOTrainer`` fills) and its
    group size (rollouts per prompt; evaluation may use its own)."""
    group = trainer.num_generations
    if not trainer.model.training:
        group = trainer.num_generations_eval or group
    return trainer.ddai_inputs, group


def unwrap_model_for_generation(model: Any, accelerator: Any, **kwargs: Any) -> Any:
    """TRL's ``trl.models.unwrap_model_for_generation`` (a context manager): the prepared
    ``model`` unwrapped from its accelerate wrapper, ZeRO-3 parameters gathered."""
    from trl.models import unwrap_model_for_generation as unwrap

    return unwrap(model, accelerator, **kwargs)


def disable_dropout(model: Any) -> None:
    """Dropout off in train mode: ``nn.Dropout`` layers (TRL's helper) and the attention dropout
    that Qwen2-style attention applies from a float attribute while training."""
    from trl.trainer.utils import disable_dropout_in_model

    disable_dropout_in_model(model)
    for module in model.modules():
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


@contextlib.contextmanager
def generation_model(trainer: Any) -> Iterator[Any]:
    """The policy ready to generate, as TRL's own generation has it: ZeRO-3 parameters gathered,
    FSDP v1 root parameters summoned."""
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        ) as model,
        trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),
    ):
        yield model


def processed_logps(
    trainer: Any,
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    vision: dict[str, Any],
    *,
    entropy: bool,
    aux_loss: bool,
) -> tuple[Any, Any, None]:
    """TRL's ``(logps [n, K], entropies [n, K] or None, None)`` of the last ``K`` =
    ``logits_to_keep`` tokens of ``input_ids [n, L]``, computed under the rollout sampler's
    processors (the rollout's ``teacher_forced_logprobs``) instead of TRL's temperature-only fused
    head. Costs the completion's ``[n, K + 1, V]`` logits in the model's dtype (TRL's fused head
    never holds them); the float32 processing is recomputed per row in the backward pass."""
    from ddai.trainer.common import TrainConfigError

    if aux_loss:
        raise TrainConfigError(
            "a mixture-of-experts policy's router loss is not computed under the sampler's "
            "processors: sample with temperature only (no repetition_penalty, top_k, top_p, "
            "min_p) or set router_aux_loss_coef=0"
        )
    with trainer.accelerator.autocast():
        # ``fused_lm_head`` off (TRL's patched forward then runs the model's own): the logits.
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            logits_to_keep=logits_to_keep + 1,
            use_cache=False,
            **vision,
        )
    logits = out.logits[:, :-1]  # [n, K, V]: position j predicts token L-K+j
    pad = (attention_mask[:, : input_ids.shape[1] - logits_to_keep] == 0).sum(-1).tolist()
    logps, ents = trainer.ddai_rollout.teacher_forced_logprobs(
        logits, input_ids, pad, entropy=entropy
    )
    return logps, ents, None


@contextlib.contextmanager
def compact_fused_head() -> Iterator[None]:
    """Within the block, TRL's fused LM head projects only the positions whose label is kept on
    the CPU too (TRL does so on Triton devices and projects every position elsewhere, so that
    Neuron's tile shapes stay fixed; the CPU has no such shapes). The per-token results are the
    same; the head's work shrinks to the kept positions."""
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original


def policy_logps(
    trainer: Any,
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    keep: Any,
    batch_size: int,
    *,
    entropy: bool,
    aux_loss: bool,
) -> tuple[Any, Any, Any]:
    """TRL's ``(logps [n, K], entropies [n, K] or None, aux loss or None)`` of the last ``K`` =
    ``logits_to_keep`` tokens of ``input_ids [n, L]``, scored only where ``keep [n, K]`` (the
    policy tokens; 0 elsewhere): TRL's own pass (its fused head, its chunks of ``batch_size``
    rows), with the observation tokens' labels set to -100 so that the head skips them."""
    import torch

    logps, ents, auxes = [], [], []
    for start in range(0, input_ids.size(0), batch_size):
        end = min(start + batch_size, input_ids.size(0))
        ids, mask = input_ids[start:end], attention_mask[start:end]
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-logits_to_keep] = -100
        labels[:, -logits_to_keep:].masked_fill_(~keep[start:end], -100)
        extra = {"output_router_logits": True} if aux_loss else {}
        with compact_fused_head(), trainer.accelerator.autocast():
            out = model(
                input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, **extra
            )
        logps.append(out.log_probs[:, -logits_to_keep:])
        if entropy:
            ents.append(out.entropy[:, -logits_to_keep:])
        if aux_loss:
            auxes.append(out.aux_loss)
    return (
        torch.cat(logps),
        torch.cat(ents) if entropy else None,
        torch.stack(auxes).mean() if aux_loss else None,
    )


def zero_outside(x: Any, keep: Any) -> Any:
    """``x [n, K]`` with 0 where ``keep [n, K]`` is false (``where``, not a product: a -inf there
    would turn into NaN)."""
    import torch

    return None if x is None else torch.where(keep, x, torch.zeros((), dtype=x.dtype))


def scoring_keep(rollout: Any, input_ids: Any, logits_to_keep: int) -> Any:
    """While TRL scores the batch it just generated (the old and reference log-prob passes), the
    rollouts' policy tokens ``[n, logits_to_keep]`` (bool) of ``input_ids [n, L]``, from their
    ``env_mask``, padded
    with 0 as TRL pads the completions; None when the rollout kept none or the shapes are not
    that batch's (TRL's own pass then scores every completion token).

    A superset of the loss's mask (TRL also zeroes a truncated completion's), which is applied
    once the batch is scored: the kept positions' log-probs are TRL's own, the others 0."""
    import torch

    masks = getattr(rollout, "env_masks", None)
    rows = input_ids.size(0)
    if masks is None or len(masks) != rows or any(len(m) > logits_to_keep for m in masks):
        return None
    keep = torch.zeros(rows, logits_to_keep, dtype=torch.bool)
    for i, mask in enumerate(masks):
        keep[i, : len(mask)] = torch.tensor(mask, dtype=torch.bool)
    return keep.to(input_ids.device)


def grpo_trainer_class() -> type:
    """``DdaiGRPOTrainer``, built on first use (importing TRL is slow) after
    ``check_trl_internals`` has checked every private method it overrides."""
    from trl import GRPOTrainer

    check_trl_internals(GRPOTrainer)

    class DdaiGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that shows the rollout its batch and logs the scored rollouts."""

        def __init__(self, *args, ddai_rollout: Any, ddai_log: Any, **kwargs):
            super().__init__(*args, rollout_func=ddai_rollout, **kwargs)
            self.ddai_rollout = ddai_rollout
            self.ddai_log = ddai_log
            self.ddai_inputs: list[dict[str, Any]] = []
            self.ddai_zero_variance = ZeroVarianceSteps()
            self.ddai_clip = (
                ClipStats(self.epsilon_low, self.epsilon_high)
                if self.loss_type in CLIP_LOSSES
                else None
            )
            self.ddai_generated_at = 0
            """The optimizer step count when the batch being trained on was generated."""
            self.ddai_capture: list[Any] | None = None
            self.ddai_keep: Any = None
            """The loss pass's policy-token mask ``[n, K]`` (bool) while ``_compute_loss`` runs."""

        def _generate_and_score_completions(self, inputs):
            self.ddai_inputs = inputs
            if self.model.training:
                self.ddai_generated_at = int(self.state.global_step)
            self.ddai_rollout.vision_fields = None
            self.ddai_rollout.env_masks = None
            try:
                out = super()._generate_and_score_completions(inputs)
            finally:
                self.ddai_rollout.env_masks = None  # the loss pass has its own (``ddai_keep``)
            if self.ddai_rollout.vision_fields is not None:
                # TRL shuffles, splits and re-joins these per rollout (``num_images``), then hands
                # them back to ``_get_per_token_logps_and_entropies`` in the loss.
                out.update(self.ddai_rollout.vision_fields)
                self.ddai_rollout.vision_fields = None
            if "tool_mask" in out:
                # The old and reference log-probs, 0 off the policy tokens as the loss pass's are.
                keep = (out["completion_mask"] * out["tool_mask"]).bool()
                for name in ("old_per_token_logps", "ref_per_token_logps"):
                    if out.get(name) is not None:
                        out[name] = zero_outside(out[name], keep)
            advantages = out["advantages"].detach().float().cpu().tolist()
            step = int(self.state.global_step) + 1
            # TRL gives each rank a contiguous slice of the global batch (``process_slice``), so
            # rank r's i-th rollout is row r·len(inputs) + i of the step's generation batch.
            rank = self.accelerator.process_index
            store = self.ddai_rollout.store
            keys = [inp["episode_key"] for inp in inputs]
            groups = store.group_rewards(keys)
            if self.ddai_log is None:
                for key in keys:
                    store.pop(key)
            else:
                rows = self.ddai_rollout.take_rows(
                    keys,
                    advantages,
                    run_id=self.ddai_log.run_id,
                    step=step,
                    first_sample=rank * len(inputs),
                    extra={"rank": rank, "rank_seed": dist.rank_seed(self.args.seed, rank)},
                )
                # Every rank's episodes to the main process, written once (collective); the
                # log commits a step's rows together when the next step's come (or at flush).
                rows = dist.gather_objects(rows)
                if self.accelerator.is_main_process:
                    self.ddai_log.append(rows, step)
            if self.model.training:
                # A step is flat when every group on every rank is (collective).
                all_groups = dist.gather_objects(list(groups.values()))
                if self.accelerator.is_main_process:
                    # One generation trains ``steps_per_generation`` optimizer steps (the run's
                    # last generation only those left before ``max_steps``).
                    span = min(self.args.steps_per_generation, self.state.max_steps - step + 1)
                    self.ddai_zero_variance.observe(step, all_groups, span)
            return out

        def _compute_loss(self, model, inputs):
            """TRL's loss; then the clip's record of this mini-batch (``ClipStats``): its largest
            ``|ratio − 1|`` (from the loss pass's log-probs), TRL's clipped share, and whether an
            optimizer step came since its generation."""
            if "tool_mask" in inputs:
                self.ddai_keep = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
            try:
                return self._ddai_loss(model, inputs)
            finally:
                self.ddai_keep = None

        def _ddai_loss(self, model, inputs):
            if self.ddai_clip is None or not self.model.training:
                return super()._compute_loss(model, inputs)
            import torch

            from ddai.trainer.losses import ratio_spread

            self.ddai_capture = []
            try:
                loss = super()._compute_loss(model, inputs)
                (logps,) = self.ddai_capture
            finally:
                self.ddai_capture = None
            old = inputs.get("old_per_token_logps")
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            spread = ratio_spread(
                logps, logps if old is None else old, mask, self.importance_sampling_level
            )
            spread = self.accelerator.gather(torch.tensor([spread], device=logps.device)).max()
            clipped = self._metrics["train"]["clip_ratio/region_mean"][-1]  # global already
            if self.accelerator.is_main_process:
                step = int(self.state.global_step)
                self.ddai_clip.observe(
                    step + 1,
                    after_update=step > self.ddai_generated_at,
                    spread=float(spread),
                    clipped=float(clipped),
                )
            return loss

        def _get_per_token_logps_and_entropies(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs
        ):
            keep = self.ddai_keep
            if keep is None:
                keep = scoring_keep(self.ddai_rollout, input_ids, logits_to_keep)
            out = self._ddai_logps(
                model, input_ids, attention_mask, logits_to_keep, batch_size, keep, **kwargs
            )
            if keep is not None:
                out = (zero_outside(out[0], keep), zero_outside(out[1], keep), out[2])
            if self.ddai_capture is not None and kwargs.get("compute_entropy"):
                self.ddai_capture.append(out[0].detach())  # the loss pass (``_compute_loss``)
            return out

        def _ddai_logps(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size, keep, **kwargs
        ):
            """Log-probs of the rollouts as they were sampled: under the sampler's processors
            (``processed_logps``) when it applies more than a temperature, and with the rollout's
            images: those of the batch being scored (old and reference log-probs) or those
            carried in ``inputs`` (the loss). In every pass over a text rollout with ``keep`` (its
            policy tokens), only those go through the LM head (``policy_logps``)."""
            import torch

            sampling = self.ddai_rollout.sampling_config
            processed = not sampling.temperature_only
            wanted = {
                "entropy": bool(kwargs.get("compute_entropy")),
                "aux_loss": bool(kwargs.get("compute_aux_loss")),
            }
            plain = all(
                v is None
                for k, v in kwargs.items()
                if k not in ("compute_entropy", "compute_aux_loss")
            )
            if self.ddai_rollout.vision is None and not processed and keep is not None and plain:
                return policy_logps(
                    self,
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    keep,
                    batch_size or input_ids.size(0),
                    **wanted,
                )
            fields = None
            if self.ddai_rollout.vision is not None:
                kwargs.pop("mm_token_type_ids", None)  # rebuilt per chunk from the ids
                fields = {k: kwargs.pop(k, None) for k in ("pixel_values", "image_grid_thw")}
                fields["num_images"] = kwargs.pop("num_images", None)
                if fields["pixel_values"] is None:
                    fields = self.ddai_rollout.vision_fields
            if fields is None and not processed:
                # TRL's own path (its fused head divides by the temperature: exact here).
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs
                )
            size = batch_size or input_ids.size(0)
            parts = []
            # Chunk here, not in TRL, so that chunks without an image go through text-only.
            for start in range(0, input_ids.size(0), size):
                end = min(start + size, input_ids.size(0))
                ids = input_ids[start:end]
                chunk = {}
                if fields is not None:
                    # Sliced where the fields lie (the CPU), then moved to the ids' device: the
                    # processor's tensors never reach the model on another device.
                    chunk = self.ddai_rollout.vision_chunk(fields, start, end, ids.device)
                    if chunk:
                        image_id = self.ddai_rollout.vision.image_token_id
                        chunk["mm_token_type_ids"] = (ids == image_id).long()
                if processed:
                    parts.append(
                        processed_logps(
                            self,
                            model,
                            ids,
                            attention_mask[start:end],
                            logits_to_keep,
                            chunk,
                            **wanted,
                        )
                    )
                    continue
                parts.append(
                    super()._get_per_token_logps_and_entropies(
                        model,
                        ids,
                        attention_mask[start:end],
                        logits_to_keep,
                        end - start,
                        **kwargs,
                        **chunk,
                    )
                )
            logps = torch.cat([p[0] for p in parts])
            ent = torch.cat([p[1] for p in parts]) if parts[0][1] is not None else None
            aux = torch.stack([p[2] for p in parts]).mean() if parts[0][2] is not None else None
            return logps, ent, aux

    return DdaiGRPOTrainer
