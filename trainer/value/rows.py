"""The rows a value head learns from, shared by ``ddai train value`` and the joint stage
(``value.sft``): rollout-log rows, the prompts' chat messages, and the held-out split with its
success/failure pairs and sampling weights (seed 004's ``max_pairs_per_problem``, difficulty bins).

The held-out prompts are one ``PromptSplit`` for both stages: ``compute_split`` draws them from the
prompt ids and a split seed (stratified by whether a prompt has both outcomes), ``train value``
records it in its checkpoint (``split.json``), and ``value-sft`` evaluates on the split its critic
recorded (``resolve_split``), so no prompt it evaluates on trained the critic.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ddai.pipelines.store import io, workspace
from ddai.trainer.value.config import DEFAULT_SPLIT_SEED, DEFAULT_VAL_FRACTION
from ddai.trainer.value.data import (
    RolloutSet,
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
    "flags",
)
"""The rollout-log columns a value head reads (training and scoring)."""


def incomplete_rows(rows: list[dict[str, Any]], include: bool) -> tuple[list[dict[str, Any]], int]:
    """``(rows to train on, rollouts flagged turns_incomplete)``: the flagged ones (a turn lost
    from the log, so their token sequence is not what the policy saw) are left out unless
    ``include``; the count is of every flagged row either way."""
    from ddai.pipelines.records.schema import TURNS_INCOMPLETE

    flagged = [TURNS_INCOMPLETE in (r.get("flags") or ()) for r in rows]
    kept = rows if include else [r for r, f in zip(rows, flagged, strict=True) if not f]
    return kept, sum(flagged)


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


def training_rows(cfg: Any) -> tuple[list[dict[str, Any]], int]:
    """``read_rows`` less the rollouts flagged ``turns_incomplete`` (kept with
    ``cfg.include_incomplete``) and their count; refuses a selection with nothing to train on."""
    rows = read_rows(cfg)
    if not rows:
        raise ValueError("no rollouts in the selected runs; check --logs and --run")
    rows, incomplete = incomplete_rows(rows, cfg.include_incomplete)
    if not rows:
        raise ValueError(
            f"every one of the {incomplete} rollouts of the selected runs is flagged "
            "turns_incomplete (a turn lost from the log); pass --include-incomplete to train on "
            "them anyway, or select other runs with --run"
        )
    return rows, incomplete


def tokenize_rows(
    rows: list[dict[str, Any]], tok: Any, cfg: Any, progress: Any = None
) -> RolloutSet:
    """``rows`` tokenized as the value head reads them, with ``cfg``'s prompts (``cfg.data``),
    system prompt, target, success threshold and lengths."""
    from ddai.pipelines.distill.rebuild import load_system_prompt
    from ddai.trainer.value.data import tokenize_rollouts

    return tokenize_rollouts(
        rows,
        tok,
        prompts=prompt_messages(cfg.data),
        system_prompt=load_system_prompt(cfg.system_prompt),
        target=cfg.target,
        success_threshold=cfg.success_threshold,
        max_length=cfg.max_length,
        obs_max_tokens=cfg.obs_max_tokens,
        progress=progress,
    )


def _require_turns(logs: Path, runs: list[str] | None) -> None:
    """A value head reads each rollout's turns: a named run without any (a flash reward log), or
    a store none of whose runs has them, is refused naming the run and the fix (else every
    rollout drops as "no turns" and the error blames --max-length)."""
    from ddai.pipelines import store
    from ddai.pipelines.store import capabilities

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
    from ddai.trainer.episode.tasks import load_tasks

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


SPLIT_FILE = "split.json"
"""The held-out split a value-head run used, in its output folder (and a critic's checkpoint)."""


@dataclass(frozen=True)
class PromptSplit:
    """The held-out prompts of a value-head run and where they came from."""

    seed: int
    val_fraction: float
    held_out: tuple[str, ...]
    """Held-out prompt uids, sorted."""
    source: str = "computed"
    """``computed`` from the seed, or ``critic``: read from the critic's ``split.json``."""

    @property
    def digest(self) -> str:
        """12 hex digits naming the held-out set (equal digests: the same prompts)."""
        return hashlib.sha1("\n".join(self.held_out).encode()).hexdigest()[:12]


def compute_split(items: list[TokenRollout], val_fraction: float, seed: int) -> PromptSplit:
    """``round(val_fraction · n)`` prompts of each stratum (prompts with both outcomes, the
    rest) held out by a seeded hash of their uid: the same prompts for the same rows and seed,
    whichever command asks."""
    rates = success_rates([r.uid for r in items], [r.success for r in items])
    held = split_prompts(
        [r.uid for r in items],
        val_fraction,
        seed=seed,
        strata={u: 0 < r < 1 for u, r in rates.items()},
    )
    return PromptSplit(seed=seed, val_fraction=val_fraction, held_out=tuple(sorted(held)))


def write_split(folder: str | Path, split: PromptSplit) -> Path:
    """``<folder>/split.json`` (atomic): seed, val_fraction, the held-out uids."""
    path = Path(folder) / SPLIT_FILE
    doc = {k: v for k, v in asdict(split).items() if k != "source"}
    doc["held_out"] = list(split.held_out)
    io.write_text(path, json.dumps(doc, indent=2) + "\n")
    return path


def read_split(folder: str | Path) -> PromptSplit | None:
    """The split a run recorded in ``folder``, or None (a checkpoint from before splits were
    recorded, or a hub id)."""
    path = Path(folder) / SPLIT_FILE
    if not path.is_file():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    return PromptSplit(
        seed=int(doc["seed"]),
        val_fraction=float(doc["val_fraction"]),
        held_out=tuple(sorted(doc["held_out"])),
        source="critic",
    )


def resolve_split(items: list[TokenRollout], cfg: Any, critic: str | None = None) -> PromptSplit:
    """The split of a run: the one ``critic`` recorded (an explicit ``--split-seed`` or
    ``--val-fraction`` that differs from it is refused: the critic trained on the other prompts),
    else ``compute_split`` with the config's seed and fraction (defaults 0 and 0.2, both
    commands)."""
    seed, fraction = cfg.split_seed, cfg.val_fraction
    recorded = read_split(critic) if critic is not None else None
    if recorded is not None:
        for flag, given, kept in (
            ("--split-seed", seed, recorded.seed),
            ("--val-fraction", fraction, recorded.val_fraction),
        ):
            if given is not None and given != kept:
                raise ValueError(
                    f"{flag} {given}: the critic {critic} held out the prompts of {flag} {kept} "
                    f"({SPLIT_FILE}) and trained on the others, so evaluating on another split "
                    f"would score prompts it learned; drop {flag} (or retrain the critic with it)"
                )
        return recorded
    return compute_split(
        items,
        DEFAULT_VAL_FRACTION if fraction is None else fraction,
        DEFAULT_SPLIT_SEED if seed is None else seed,
    )


def split_data(
    items: list[TokenRollout],
    cfg: Any,
    split: PromptSplit | None = None,
    dropped: dict[str, int] | None = None,
) -> Split:
    """Hold out ``split``'s prompts (default: ``resolve_split`` without a critic), pair each side,
    weight pairs. ``dropped``: the rollouts left out before (by reason), named when no pair is
    left."""
    rates = success_rates([r.uid for r in items], [r.success for r in items])
    held = set((split or resolve_split(items, cfg)).held_out)
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
            + (
                f" ({len(items)} rollout(s) kept; left out before pairing: "
                + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
                + ")"
                if dropped
                else ""
            )
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
