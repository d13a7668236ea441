"""The rows a value head learns from, shared by ``ddai train value`` and the joint stage
(``value.sft``): rollout-log rows, the prompts' chat messages, and the held-out split with its
success/failure pairs and sampling weights (seed 004's ``max_pairs_per_problem``, difficulty bins).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddai.pipelines import workspace
from ddai.trainer.value.data import (
    TokenRollout,
    bin_weights,
    make_pairs,
    split_prompts,
    success_rates,
)

ROLLOUT_COLUMNS = (
    "run_id",
    "uid",
    "rollout_idx",
    "question",
    "response",
    "turns",
    "judge_score",
    "format_ok",
    "reward",
)
"""The rollout-log columns a value head reads (training and scoring)."""


def read_rows(cfg: Any) -> list[dict[str, Any]]:
    """The rollout-log rows a value head trains on (``cfg.logs``, ``cfg.runs``)."""
    from ddai.pipelines.store import read_rollouts

    logs = workspace.logs_dir(cfg.logs)
    if not logs.is_dir():
        raise FileNotFoundError(
            f"log store {logs} does not exist; pass --logs or ingest a run first"
        )
    _require_turns(logs, cfg.runs)
    return read_rollouts(logs, cfg.runs, columns=list(ROLLOUT_COLUMNS)).to_pylist()


def _require_turns(logs: Path, runs: list[str] | None) -> None:
    """A value head reads each rollout's turns: a named run without any (a flash reward log), or
    a store none of whose runs has them, is refused naming the run and the fix (else every
    rollout drops as "no turns" and the error blames --max-length)."""
    from ddai.pipelines import capabilities, store

    caps = capabilities.for_runs(logs, runs or store.list_runs(logs))
    lacking = [c for c in caps.values() if not c.has("turns")]
    if lacking and (runs or len(lacking) == len(caps)):
        capabilities.require(
            lacking, "turns", needed_by="Training a value head", why="to read each turn"
        )


def prompt_messages(data: Path | None) -> dict[str, list[dict[str, str]]] | None:
    """uid → chat prompt from a verl-shaped prompt set, or None."""
    if data is None:
        return None
    from ddai.trainer.search.tasks import load_tasks

    return {t.uid: [dict(m) for m in t.messages] for t in load_tasks(data)}


@dataclass
class Split:
    """Training and held-out rollouts, their pairs, and the training sampling weights."""

    train: list[TokenRollout]
    val: list[TokenRollout]
    train_pairs: list[tuple[int, int]]
    val_pairs: list[tuple[int, int]]
    weights: torch.Tensor
    """``[N]`` sampling weight per training pair (per training rollout in MC-only mode)."""


def split_data(items: list[TokenRollout], cfg: Any) -> Split:
    """Hold out prompts (stratified by whether they have pairs), pair each side, weight pairs."""
    rates = success_rates([r.uid for r in items], [r.success for r in items])
    held = split_prompts(
        [r.uid for r in items],
        cfg.val_fraction,
        seed=cfg.seed,
        strata={u: 0 < r < 1 for u, r in rates.items()},
    )
    train = [r for r in items if r.uid not in held]
    val = [r for r in items if r.uid in held]
    if not train:
        raise ValueError("no training rollouts left after the held-out split; lower --val-fraction")

    def pairs_of(sub: list[TokenRollout]) -> list[tuple[int, int]]:
        return make_pairs(
            [r.uid for r in sub],
            [r.success for r in sub],
            max_pairs_per_problem=cfg.max_pairs_per_problem,
            seed=cfg.seed,
        )

    train_pairs, val_pairs = pairs_of(train), pairs_of(val)
    if cfg.pairwise_coef > 0 and not train_pairs:
        raise ValueError(
            "no training prompt has both a successful and a failed rollout, so there are no pairs; "
            "add runs, change --success-threshold, or fit MC targets alone with --pairwise-coef 0"
        )
    if cfg.pairwise_coef > 0 and cfg.bin_edges:
        pair_rates = [rates[train[p].uid] for p, _ in train_pairs]
        weights = torch.tensor(
            bin_weights(pair_rates, cfg.bin_edges, cfg.bin_weights), dtype=torch.double
        )
    else:
        weights = torch.ones(
            len(train_pairs) if cfg.pairwise_coef > 0 else len(train), dtype=torch.double
        )
    return Split(train, val, train_pairs, val_pairs, weights)
