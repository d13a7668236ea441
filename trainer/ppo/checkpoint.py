"""Resumable PPO checkpoints: ``<out>/checkpoint-N/`` holds the policy (a model folder), the
critic (``critic/``, a value checkpoint), both optimizers' states (``optimizers.pt``), every
rank's random states (``rng_state.pt``, ``ppo.rng``) and ``ppo_state.json`` (the step and run
id), so ``ddai train ppo --resume`` continues at step N+1 with the same run id, Adam moments,
random streams and rollout log: exactly the steps a run without the stop would have taken. The folder name is the one
``common.resume_checkpoint`` finds (transformers' ``checkpoint-N``).

A checkpoint is written to a temporary sibling and renamed into place, so a crash mid-write leaves
the previous checkpoint intact; older checkpoints are then removed (one is enough to resume).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddai.trainer.common import TrainConfigError
from ddai.trainer.ppo.config import CRITIC_DIR

STATE_FILE = "ppo_state.json"
OPTIM_FILE = "optimizers.pt"
RNG_FILE = "rng_state.pt"


@dataclass
class PPOState:
    step: int
    """Steps finished when the checkpoint was written."""
    run_id: str
    critic_source: str
    """Where the critic's trunk first came from (kept in the critic's checkpoint on resume)."""


def save_checkpoint(
    out: Path,
    state: PPOState,
    *,
    policy: Any,
    tok: Any,
    critic: Any,
    optimizers: dict[str, Any],
    rng: list[dict[str, Any]] | None = None,
) -> Path:
    """Write ``<out>/checkpoint-<step>`` atomically and drop older ``checkpoint-*`` folders;
    ``optimizers``: both optimizers' states (``sharding.optimizer_states``), ``rng``: every
    rank's ``rng.rng_state``, in rank order."""
    from ddai.trainer.runtime.save import save_model
    from ddai.trainer.value.critic import save_value_model

    out = Path(out)
    final = out / f"checkpoint-{state.step}"
    tmp = out / f".checkpoint-{state.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(policy, tok, tmp)
    save_value_model(critic, tok, tmp / CRITIC_DIR, source=state.critic_source)
    torch.save(optimizers, tmp / OPTIM_FILE)
    if rng is not None:
        torch.save(rng, tmp / RNG_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(state.__dict__), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in out.glob("checkpoint-*"):
        if old != final and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(ckpt: str | Path) -> PPOState:
    """The ``ppo_state.json`` of a checkpoint; a folder without one is not a PPO checkpoint."""
    path = Path(ckpt) / STATE_FILE
    if not path.is_file():
        raise TrainConfigError(
            f"--resume: {ckpt} has no {STATE_FILE} (not a `ddai train ppo` checkpoint); "
            "point --out-dir at the PPO run's folder or run without --resume"
        )
    return PPOState(**json.loads(path.read_text(encoding="utf-8")))


def read_optimizers(ckpt: str | Path) -> dict[str, Any]:
    """Both optimizers' saved states (``sharding.load_optimizer_states`` puts them back)."""
    return torch.load(Path(ckpt) / OPTIM_FILE, map_location="cpu", weights_only=True)


def load_rng(ckpt: str | Path) -> list[dict[str, Any]] | None:
    """Every rank's random states saved with the checkpoint (None: a checkpoint from before they
    were saved)."""
    path = Path(ckpt) / RNG_FILE
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def keep_metrics_until(path: Path, step: int) -> list[str]:
    """The lines of a ``metrics.jsonl`` for steps ``<= step`` (what a resumed run keeps; rows a
    crashed run logged after its checkpoint are dropped, as the steps are redone)."""
    if not path.is_file():
        return []
    return [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line).get("step", 0) <= step
    ]
