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
    """End this process's group, if one is up (nothing otherwise; safe to call twice).

    A gloo group left to interpreter teardown can abort a finished process with "terminate called
    without an active exception" (SIGABRT), so a launcher would report a run that completed as
    failed. No barrier first: a rank leaving on an error must not wait for the others."""
    if _initialized():
        import torch.distributed as td

        td.destroy_process_group()


_END_AT_EXIT: list[bool] = []


def end_group_at_exit() -> None:
    """Have ``shutdown`` run when this process exits (registered once; harmless without a group).

    Training entry points call it, so a script that calls ``run_grpo``/``run_ppo`` under
    ``accelerate launch`` ends its group as ``ddai`` does, instead of aborting at teardown."""
    if not _END_AT_EXIT:
        import atexit

        atexit.register(shutdown)
        _END_AT_EXIT.append(True)
