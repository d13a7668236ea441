"""Rank awareness for ddai's own training loops (PPO, value head, pointer selector), through
``accelerate``: one process per device under ``accelerate launch`` (DDP), one plain process
otherwise.

- ``make_accelerator``: an ``Accelerator`` on the CPU (gloo) when there is no GPU, so 2 CPU
  processes train together under ``accelerate launch --multi_gpu --num_processes 2``;
- ``rank_seed``: each rank samples with ``seed + process_index`` (the model is initialised from the
  base seed on every rank, so weights start equal; DDP also broadcasts them from rank 0);
- ``gather_rows``: python objects (rollout-log rows) from every rank, in rank order, on the main
  process, where they are written once;
- ``mean_metrics``: per-rank metric dicts averaged over the ranks;
- ``run_info`` / ``write_run_config``: ``run_config.json`` (the settings, world size, per-rank
  seeds), written atomically by the main process only.

Writes of logs, metrics and checkpoints happen on ``accelerator.is_main_process`` only; callers
check it (``main_only`` reads better at call sites that do several).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import torch

from ddai.trainer.common import jsonable
from ddai.trainer.runtime import dist

RUN_CONFIG_FILE = "run_config.json"


def make_accelerator(*, gradient_accumulation_steps: int = 1, cpu: bool | None = None) -> Any:
    """The run's ``Accelerator``; ``cpu=True`` when no GPU is visible (gloo process group) or
    when asked (models too small to gain from a GPU)."""
    from accelerate import Accelerator

    dist.end_group_at_exit()
    return Accelerator(
        cpu=(not torch.cuda.is_available()) if cpu is None else cpu,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )


def rank_seed(seed: int, accelerator: Any) -> int:
    """This rank's sampling seed (``dist.rank_seed``: ``seed + process_index``), applied to
    python's, torch's (and CUDA's) generators."""
    s = dist.rank_seed(int(seed), int(accelerator.process_index))
    random.seed(s)
    torch.manual_seed(s)
    return s


def rank_seeds(seed: int, accelerator: Any) -> list[int]:
    """The sampling seed of every rank, in rank order (what ``rank_seed`` gives each)."""
    return [dist.rank_seed(int(seed), r) for r in range(int(accelerator.num_processes))]


def gather_rows(rows: list[Any], accelerator: Any) -> list[Any]:
    """Every rank's ``rows`` concatenated in rank order (on every rank; one process: ``rows``):
    ``dist.gather_objects`` with the accelerator's own process count."""
    if accelerator.num_processes == 1:
        return list(rows)
    return dist.gather_objects(list(rows))


def mean_metrics(metrics: dict[str, float], accelerator: Any) -> dict[str, float]:
    """Each metric averaged over the ranks that report it (a rank may lack a key, e.g. judge
    coverage when none of its episodes needed the judge); every rank gets the same dict."""
    if accelerator.num_processes == 1:
        return dict(metrics)
    every = gather_rows([dict(metrics)], accelerator)
    keys = list(dict.fromkeys(k for m in every for k in m))
    out: dict[str, float] = {}
    for k in keys:
        vals = [float(m[k]) for m in every if k in m and m[k] is not None]
        out[k] = sum(vals) / len(vals) if vals else float("nan")
    return out


def run_info(seed: int | None, accelerator: Any) -> dict[str, Any]:
    """What a run config records about the launch: world size, backend, each rank's seed."""
    return {
        "world_size": int(accelerator.num_processes),
        "distributed_type": str(accelerator.distributed_type),
        "seeds": rank_seeds(seed, accelerator) if seed is not None else None,
    }


def write_run_config(
    out_dir: str | os.PathLike[str], config: Any, accelerator: Any, *, command: str | None = None
) -> Path:
    """``<out_dir>/run_config.json``: ``command``, ``config`` (a dataclass or dict) and
    ``run_info``, written atomically by the main process; returns the path. (Commands with a
    preflight write theirs with ``preflight.write_run_config(..., extra=run_info(...))``.)"""
    path = Path(out_dir) / RUN_CONFIG_FILE
    if accelerator.is_main_process:
        seed = getattr(config, "seed", None)
        if seed is None and isinstance(config, dict):
            seed = config.get("seed")
        doc = {"command": command, "config": jsonable(config), **run_info(seed, accelerator)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return path


def local_slice(items: list[Any], accelerator: Any) -> list[Any]:
    """This rank's contiguous share of a global list whose length divides by the world size."""
    n, world = len(items), int(accelerator.num_processes)
    if n % world:
        raise ValueError(f"{n} items do not split evenly over {world} processes")
    per = n // world
    r = int(accelerator.process_index)
    return items[r * per : (r + 1) * per]
