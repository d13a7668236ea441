"""Rank awareness for training under ``accelerate launch`` (DDP, DeepSpeed ZeRO, FSDP).

Every helper works unchanged in a single process (no ``torch.distributed`` group): then the
process is rank 0 of 1, gathers return the local value and barriers do nothing. Under a launcher
the rules are: each episode is logged once (rows gathered to the main process, which writes),
progress, summaries, metrics and checkpoints come from the main process only, and sampling seeds
differ per rank (``rank_seed``) so two ranks never draw the same random stream.
"""

from __future__ import annotations

from typing import Any


def _initialized() -> bool:
    import torch.distributed as td

    return td.is_available() and td.is_initialized()


def rank() -> int:
    """This process's global rank (0 without a process group)."""
    import torch.distributed as td

    return td.get_rank() if _initialized() else 0


def world_size() -> int:
    """Number of training processes (1 without a process group)."""
    import torch.distributed as td

    return td.get_world_size() if _initialized() else 1


def is_main() -> bool:
    return rank() == 0


def rank_seed(seed: int, process_rank: int | None = None) -> int:
    """The sampling seed of a rank: ``seed + rank``, as accelerate's ``set_seed(seed,
    device_specific=True)`` sets it (TRL's GRPOTrainer does so at start)."""
    return seed + (rank() if process_rank is None else process_rank)


def gather_objects(items: list[Any]) -> list[Any]:
    """Every rank's ``items`` concatenated in rank order (on every rank); the list itself alone."""
    if world_size() == 1:
        return list(items)
    from accelerate.utils import gather_object

    return list(gather_object(list(items)))


def any_across_ranks(flag: bool) -> bool:
    """True when ``flag`` is true on some rank (an all-reduce MAX; collective: every rank calls)."""
    if world_size() == 1:
        return flag
    import torch
    import torch.distributed as td

    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_collective_device())
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return bool(t.item())


def _collective_device() -> Any:
    """The device collectives of this process group run on (CUDA under NCCL, else CPU)."""
    import torch
    import torch.distributed as td

    if "nccl" in str(td.get_backend()) and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def allow_fsdp_on_cpu(args: Any) -> bool:
    """Let an FSDP launch config take effect on a CPU-only machine; True when it did.

    accelerate builds its FSDP plugin only for accelerator process groups and quietly runs a gloo
    group as plain data parallel, though torch's FSDP2 shards over gloo on CPU. Under ``accelerate
    launch`` with an FSDP config (``ACCELERATE_USE_FSDP``) and no CUDA, this marks the group so the
    trainer's ``Accelerator`` takes the FSDP path (the device stays the CPU). Call it after the
    TRL config exists (``args``: its ``PartialState`` is made then) and before the trainer.
    """
    import os

    import torch

    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return False
    if torch.cuda.is_available() or not getattr(args, "use_cpu", False):
        return False
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    _ = args.device  # makes the process group and PartialState
    state = PartialState()
    if state.distributed_type != DistributedType.MULTI_CPU or AcceleratorState._shared_state:
        return False
    # AcceleratorState turns a multi-device group with ACCELERATE_USE_FSDP into FSDP.
    state.distributed_type = DistributedType.MULTI_GPU
    return True


def shutdown() -> None:
    """End this process's groups and free them now, while the interpreter is whole (nothing to do
    without a group: safe to call twice).

    ``destroy_process_group`` only forgets the groups: FSDP2 shards over a ``DeviceMesh``, a mesh
    holds its groups, and torch's DTensor caches (sharding propagation, redistribute plans) keep
    every mesh they saw. So a gloo group and its native threads lived on into interpreter
    teardown, where a finished FSDP rank could abort ("terminate called without an active
    exception", SIGABRT) and a launcher report a completed run as failed. The same for
    ``torch.distributed.nn.functional``: imported while a group is up, its functions keep that
    group as their default ``group``. Dropping those last references here frees the groups, which
    joins their threads. No barrier first: a rank leaving on an error must not wait for the
    others."""
    if _initialized():
        import torch.distributed as td

        td.destroy_process_group()
        _release_meshes()
        _release_default_groups()
        import gc

        gc.collect()  # a finished run's objects in reference cycles hold groups too (PPO's do)


def _release_meshes() -> None:
    """Make every live ``DeviceMesh`` drop its process groups (all destroyed by then, so no mesh
    can use them again)."""
    import sys

    if "torch.distributed.device_mesh" not in sys.modules:
        return  # no mesh was ever made: nothing holds a group
    import gc

    from torch.distributed.device_mesh import DeviceMesh

    for obj in gc.get_objects():  # garbage not yet collected included: no collection needed
        # The class's MRO, not ``isinstance``: DeviceMesh's metaclass runs Python code (and
        # attribute look-ups that warn) for every object otherwise.
        if DeviceMesh not in type(obj).__mro__:
            continue
        # ``_pg_registry``: the mesh's name -> group map (recent torch); absent, nothing to drop.
        groups = getattr(obj, "_pg_registry", None)
        if groups:
            groups.clear()


def _release_default_groups() -> None:
    """Point ``torch.distributed.nn.functional``'s ``group=group.WORLD`` defaults, bound to the
    default group of when it was imported, at ``None`` (torch's "the default group", the same
    meaning, resolved at call time), so they stop holding a destroyed group."""
    import sys

    functional = sys.modules.get("torch.distributed.nn.functional")
    if functional is None:
        return
    from torch.distributed import ProcessGroup

    for fn in vars(functional).values():
        defaults = getattr(fn, "__defaults__", None)
        if defaults and any(isinstance(d, ProcessGroup) for d in defaults):
            fn.__defaults__ = tuple(None if isinstance(d, ProcessGroup) else d for d in defaults)


_END_AT_EXIT: list[bool] = []


def end_group_at_exit() -> None:
    """Have ``shutdown`` run when this process exits (registered once; harmless without a group).

    Training entry points call it, so a script that calls ``run_grpo``/``run_ppo`` under
    ``accelerate launch`` ends its group as ``ddai`` does, instead of aborting at teardown."""
    if not _END_AT_EXIT:
        import atexit

        atexit.register(shutdown)
        _END_AT_EXIT.append(True)
