"""``ddai train ppo`` with sharded weights (FSDP2 through ``accelerate launch --config_file
configs/accelerate/fsdp.yaml``), as ``ddai train grpo`` runs them:

- ``make_accelerator``: the run's ``Accelerator``; on a CPU-only machine an FSDP launch config
  still takes accelerate's FSDP path (``dist.allow_fsdp_on_cpu``: FSDP2 shards over gloo);
- ``prepare``: policy and critic each prepared with its own optimizer (FSDP2 prepares one model
  per call);
- ``generation_model``: the policy as TRL's own generation has it
  (``trl.models.unwrap_model_for_generation``: ZeRO-3 parameters gathered, FSDP2's per-layer
  all-gathers in each forward, gradient checkpointing off while sampling). Every rank steps its
  episodes in lock-step (``episode.rollout``), so the all-gathers line up;
- ``saveable``: the policy and critic for a save: the modules themselves when unsharded, else
  full copies built on the main process from the trainer's gather (``Accelerator.get_state_dict``,
  a collective every rank calls), so the saved folders hold the trained weights, not one shard;
- ``optimizer_states`` / ``load_optimizer_states``: both optimizers' states, full and keyed by
  parameter name under FSDP (``torch.distributed.checkpoint``), so a checkpoint resumes under
  FSDP too.

Refused with exit 2: DeepSpeed (PPO steps two models with their own optimizers, which a DeepSpeed
engine does not take) and ``--lora`` under FSDP (the peft model has no single FSDP root).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from ddai.trainer.common import TrainConfigError


def make_accelerator(*, gradient_accumulation_steps: int) -> Any:
    """The run's ``Accelerator`` (``runtime.accel.make_accelerator``), with an FSDP launch config
    honoured on CPU; DeepSpeed refused."""
    from accelerate.utils import DistributedType

    from ddai.trainer.runtime import accel, dist

    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if fsdp and not torch.cuda.is_available():
        from accelerate.state import PartialState

        PartialState(cpu=True)  # the gloo group, before the FSDP switch reads it
        dist.allow_fsdp_on_cpu(SimpleNamespace(use_cpu=True, device=None))
    acc = accel.make_accelerator(gradient_accumulation_steps=gradient_accumulation_steps)
    if acc.distributed_type == DistributedType.DEEPSPEED:
        raise TrainConfigError(
            "train ppo does not run under DeepSpeed: it steps a policy and a critic with their "
            "own optimizers; for sharded weights launch it with configs/accelerate/fsdp.yaml"
        )
    return acc


def is_sharded(acc: Any) -> bool:
    """True when the trained weights are split across ranks (FSDP)."""
    from accelerate.utils import DistributedType

    return acc.distributed_type == DistributedType.FSDP


def prepare(acc: Any, policy: Any, critic: Any, policy_opt: Any, critic_opt: Any) -> tuple:
    """``(policy, critic, policy_opt, critic_opt)`` prepared: DDP-wrapped, or sharded in place
    (FSDP2), one model with its optimizer per call."""
    if is_sharded(acc) and getattr(policy, "peft_config", None):
        raise TrainConfigError(
            "train ppo --lora under FSDP is not supported yet (the peft model has no single FSDP "
            "root); train the adapter without the FSDP config (DDP: every rank holds the frozen "
            "base, the adapter is small), or the full policy under FSDP without --lora"
        )
    if is_sharded(acc) and getattr(critic, "_no_split_modules", None) is None:
        # FSDP's transformer wrap policy shards per decoder layer: the critic's are its trunk's
        critic._no_split_modules = getattr(critic.trunk, "_no_split_modules", None)
    policy, policy_opt = acc.prepare(policy, policy_opt)
    critic, critic_opt = acc.prepare(critic, critic_opt)
    return policy, critic, policy_opt, critic_opt


@contextlib.contextmanager
def generation_model(policy: Any, acc: Any) -> Iterator[Any]:
    """The prepared ``policy`` ready to sample from (``trl.models.unwrap_model_for_generation``,
    checkpointing restored as the run set it)."""
    from ddai.trainer.trl_compat import unwrap_model_for_generation

    with unwrap_model_for_generation(
        policy, acc, gradient_checkpointing_kwargs={"use_reentrant": False}
    ) as model:
        yield model


def _full_policy(model: Any, state: dict[str, torch.Tensor]) -> Any:
    """An unsharded causal LM (or VLM, ``--observation image``) like ``model`` holding ``state``
    (built on the meta device, so nothing is initialised twice)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    vlm = getattr(model.config, "vision_config", None) is not None
    auto = AutoModelForImageTextToText if vlm else AutoModelForCausalLM
    with torch.device("meta"):
        full = auto.from_config(model.config, dtype=model.dtype)
    full.load_state_dict(state, assign=True)
    full.tie_weights()
    full.generation_config = model.generation_config
    return full.eval()


def _full_critic(critic: Any, state: dict[str, torch.Tensor]) -> Any:
    """An unsharded ``ValueModel`` like ``critic`` holding ``state``."""
    from transformers import AutoModel

    from ddai.trainer.value.critic import ValueModel, build_head

    with torch.device("meta"):
        trunk = AutoModel.from_config(critic.trunk.config, dtype=critic.trunk.dtype)
        head = build_head(critic.head_type, critic.hidden_size, dropout=critic.dropout)
    full = ValueModel(
        trunk, head, head_type=critic.head_type, unfreeze=critic.unfreeze, dropout=critic.dropout
    )
    full.load_state_dict(state, assign=True)
    return full.eval()


def saveable(acc: Any, policy: Any, critic: Any) -> tuple[Any, Any]:
    """``(policy, critic)`` to save on the main process (None elsewhere when sharded). Unsharded:
    the bare modules. Sharded: full copies of the gathered weights (``Accelerator.get_state_dict``
    is a collective: every rank calls this)."""
    bare_policy, bare_critic = acc.unwrap_model(policy), acc.unwrap_model(critic)
    if not is_sharded(acc):
        return bare_policy, bare_critic
    policy_state = acc.get_state_dict(policy)
    critic_state = acc.get_state_dict(critic)
    if not acc.is_main_process:
        return None, None
    return _full_policy(bare_policy, policy_state), _full_critic(bare_critic, critic_state)


def _base(opt: Any) -> Any:
    return getattr(opt, "optimizer", opt)  # accelerate's AcceleratedOptimizer wraps it


def optimizer_states(
    acc: Any, policy: Any, critic: Any, policy_opt: Any, critic_opt: Any
) -> dict[str, Any]:
    """Both optimizers' states for a checkpoint: ``state_dict()`` as is when unsharded; under FSDP
    the full states keyed by parameter name (a collective)."""
    if not is_sharded(acc):
        return {"policy": policy_opt.state_dict(), "critic": critic_opt.state_dict()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "format": "full-by-name",
        "policy": get_optimizer_state_dict(policy, _base(policy_opt), options=opts),
        "critic": get_optimizer_state_dict(critic, _base(critic_opt), options=opts),
    }


def load_optimizer_states(
    acc: Any, states: dict[str, Any], policy: Any, critic: Any, policy_opt: Any, critic_opt: Any
) -> None:
    """Restore what ``optimizer_states`` saved into the prepared optimizers (every rank reads the
    file; under FSDP each keeps its shard)."""
    full = states.get("format") == "full-by-name"
    if full != is_sharded(acc):
        raise TrainConfigError(
            "--resume: the checkpoint's optimizer states were written "
            + ("under FSDP" if full else "without FSDP")
            + "; resume it with the accelerate config it was trained with"
        )
    if not full:
        policy_opt.load_state_dict(states["policy"])
        critic_opt.load_state_dict(states["critic"])
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(policy, _base(policy_opt), states["policy"], options=opts)
    set_optimizer_state_dict(critic, _base(critic_opt), states["critic"], options=opts)
