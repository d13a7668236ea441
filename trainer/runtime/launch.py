"""``ddai train … --launch N``: re-run the same command under ``accelerate launch`` on N processes.

The command line is kept as typed, minus ``--launch`` / ``--accelerate-config``, and handed to
``accelerate launch -m ddai.cli.app`` with a free rendezvous port. With ``--accelerate-config
FILE`` (one of ``configs/accelerate/*.yaml`` or your own) accelerate reads the distributed setup
from the file; without one it is plain multi-process data parallel (``--multi_gpu``). On a machine
without CUDA the trainers train on CPU (``use_cpu``), so the processes form a gloo group: that is
how ``--launch 2`` runs on a laptop. (``accelerate launch --cpu`` starts one process only.) An
FSDP config works on CPU too (``dist.allow_fsdp_on_cpu``); DeepSpeed needs CUDA.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

LAUNCH_FLAGS = ("--launch", "--accelerate-config")


def strip_flags(argv: Sequence[str], flags: Sequence[str] = LAUNCH_FLAGS) -> list[str]:
    """``argv`` without ``flags`` and their values (``--flag V`` and ``--flag=V`` forms)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_command(
    args: Sequence[str],
    num_processes: int,
    *,
    config_file: str | os.PathLike[str] | None = None,
    port: int | None = None,
) -> list[str]:
    """The ``accelerate launch`` command that runs ``ddai ARGS`` on ``num_processes`` ranks."""
    import torch

    if num_processes < 1:
        raise ValueError(f"--launch {num_processes}: give a number of processes ≥ 1")
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if config_file is not None:
        if not Path(config_file).is_file():
            raise FileNotFoundError(
                f"--accelerate-config {config_file} not found; use one of configs/accelerate/*.yaml"
            )
        cmd += ["--config_file", str(config_file)]
    else:
        cmd += ["--multi_gpu"]
    if not torch.cuda.is_available():
        # CPU training is float32 (as ``common.device_defaults``), whatever a GPU config says.
        cmd += ["--mixed_precision", "no"]
    cmd += [
        "--num_processes",
        str(num_processes),
        "--num_machines",
        "1",
        "--main_process_port",
        str(port or free_port()),
        "--module",
        "ddai.cli.app",
        *args,
    ]
    return cmd


def relaunch(
    argv: Sequence[str], num_processes: int, config_file: str | os.PathLike[str] | None
) -> int:
    """Run this command line again under accelerate; the exit code of the launcher."""
    if "LOCAL_RANK" in os.environ:
        raise ValueError("--launch: already running under a launcher; drop --launch")
    cmd = launch_command(strip_flags(argv), num_processes, config_file=config_file)
    env = dict(os.environ)
    # One OpenMP thread per process unless the user chose: N ranks share the cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.call(cmd, env=env)
