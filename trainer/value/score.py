"""``ddai value score``: per-turn value estimates written back into the rollout log.

A turn's value is the value head's estimate of the state *before* the turn: the value read at the
position preceding its first policy token, which has seen the question and every earlier action
and observation. So the change from one turn's value to the next is what that turn (its action
and the environment's answer) did to the expected success; the report's value-curve section
reads exactly that. Forced completions (written by the environment) and turns cut by
``max_length`` get no value.

The log is never edited in place: each scored run is written as a new version of its partition
(or as a new run with ``out_run``) through ``ddai.pipelines.store.write_run``. A run without
parsed turns, or whose rollouts all drop (e.g. prompts over ``max_length``), is not written:
named with ``--run`` it is an error (CLI exit 2), else it is listed in ``skipped``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ddai.pipelines import store
from ddai.pipelines.records import schema
from ddai.pipelines.records.deps import pa
from ddai.pipelines.store import capabilities, run_stats, workspace
from ddai.trainer.runtime.metrics_log import device
from ddai.trainer.value import losses as vl
from ddai.trainer.value.config import ValueScoreConfig
from ddai.trainer.value.data import tokenize_rollouts
from ddai.trainer.value.model import load_value_model
from ddai.trainer.value.rows import ROLLOUT_COLUMNS, prompt_messages
from ddai.trainer.value.train import sequence_values


@dataclass
class ValueScoreResult:
    checkpoint: str
    logs: str
    runs: dict[str, str]
    """Scored run → the run its values were written to."""
    rollouts: int
    turns_valued: int
    dropped: dict[str, int] = field(default_factory=dict)
    auc: float | None = None
    """AUC of each rollout's mean policy-token value against success."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Run → why it was not scored and not written (no parsed turns, no rollout to score)."""


def turn_values(values: torch.Tensor, starts: list[int | None]) -> list[float | None]:
    """The value before each turn: ``values[start]`` for turns with policy tokens, else None.

    ``values``: ``[T]`` completion-aligned values of one rollout.
    """
    return [None if s is None else float(values[s]) for s in starts]


def with_turn_values(table: pa.Table, values: list[list[float | None] | None]) -> pa.Table:
    """``table`` with ``turns[].value`` replaced row by row; a row without values (not scored) has
    its turn values cleared, so a partition never mixes two checkpoints' estimates."""
    turns = table.column("turns").to_pylist()
    out = []
    for row_turns, vals in zip(turns, values, strict=True):
        if row_turns is None:
            out.append(None)
            continue
        vals = vals if vals is not None else [None] * len(row_turns)
        out.append([{**t, "value": v} for t, v in zip(row_turns, vals, strict=True)])
    col = pa.array(out, type=pa.list_(schema.TURN_TYPE))
    return table.set_column(table.schema.get_field_index("turns"), "turns", col)


def score_table(
    model: Any,
    tok: Any,
    table: pa.Table,
    cfg: ValueScoreConfig,
    *,
    prompts: dict | None,
    system_prompt: str,
    advance: Any,
) -> tuple[pa.Table, dict[str, Any]]:
    """Score one run's rollouts; returns the table with turn values and the counts."""
    rows = table.select(list(ROLLOUT_COLUMNS)).to_pylist()
    data = tokenize_rollouts(
        rows,
        tok,
        prompts=prompts,
        system_prompt=system_prompt,
        success_threshold=cfg.success_threshold,
        max_length=cfg.max_length,
        obs_max_tokens=cfg.obs_max_tokens,
    )
    per_row: list[list[float | None] | None] = [None] * len(rows)
    means: list[float] = []
    labels: list[bool] = []
    for start in range(0, len(data.rollouts), cfg.batch_size):
        chunk = data.rollouts[start : start + cfg.batch_size]
        values = sequence_values(model, chunk, tok.pad_token_id, batch_size=cfg.batch_size)
        for item, v in zip(chunk, values, strict=True):
            per_row[item.row] = turn_values(v, item.turn_starts)
            means.append(float(vl.sequence_mean(v[None], torch.tensor(item.mask)[None])[0]))
            labels.append(item.success)
        advance(len(chunk))
    advance(len(rows) - len(data.rollouts))
    counts = {
        "rollouts": len(data.rollouts),
        "turns_valued": sum(x is not None for vals in per_row if vals for x in vals),
        "dropped": data.dropped,
        "means": means,
        "labels": labels,
    }
    return with_turn_values(table, per_row), counts


def score_runs(cfg: ValueScoreConfig) -> ValueScoreResult:
    """Score every selected run and write each back as a new version of its partition."""
    from ddai.pipelines.distill.rebuild import load_system_prompt
    from ddai.pipelines.records.progress import bar
    from ddai.trainer.common import hf_progress

    cfg.check()
    hf_progress(cfg.progress)  # transformers' weight-load bar follows --progress too
    system_prompt = load_system_prompt(cfg.system_prompt)
    logs = workspace.logs_dir(cfg.logs)
    runs = cfg.runs or store.list_runs(logs)
    if not runs:
        raise FileNotFoundError(
            f"no runs in the log store {logs}; pass --logs or ingest a run first"
        )
    runs, skipped = _runs_with_turns(logs, runs, named=bool(cfg.runs))
    if cfg.out_run is not None:
        _check_out_run(logs, runs[0], cfg.out_run)
    total = sum(store.dataset(logs, [r]).count_rows() for r in runs)
    model, tok = load_value_model(cfg.checkpoint, dtype=cfg.dtype)
    model.to(device())
    prompts = prompt_messages(cfg.data)
    written: dict[str, str] = {}
    dropped: dict[str, int] = {}
    n_rollouts = n_turns = 0
    means: list[float] = []
    labels: list[bool] = []
    with bar("value score", total, enabled=cfg.progress) as advance:
        for run in runs:
            table, version = store.read_version(logs, run)  # one run in memory at a time
            scored, counts = score_table(
                model,
                tok,
                table,
                cfg,
                prompts=prompts,
                system_prompt=system_prompt,
                advance=advance,
            )
            if not counts["rollouts"]:
                # nothing valued: writing would give a new version (or run) with no value
                reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(counts["dropped"].items()))
                skipped[run] = f"no rollout could be scored ({reasons or 'no rollouts'})"
                continue
            target = cfg.out_run or run
            old = store.run_manifest(logs, run) or {}
            store.write_run(
                logs,
                target,
                scored,
                sources=old.get("sources", []),
                manifest={
                    "value_scored": {
                        "checkpoint": str(Path(cfg.checkpoint).resolve()),
                        "from_run": run,
                        "rollouts_scored": counts["rollouts"],
                        "turns_valued": counts["turns_valued"],
                        "dropped": counts["dropped"],
                    }
                },
                # in place: only over the version scored (rows appended meanwhile stay)
                if_unchanged=version if target == run else None,
            )
            run_stats.refresh(logs, [target])  # ``ddai runs``'s row of the new version
            written[run] = target
            n_rollouts += counts["rollouts"]
            n_turns += counts["turns_valued"]
            means += counts["means"]
            labels += counts["labels"]
            for k, v in counts["dropped"].items():
                dropped[k] = dropped.get(k, 0) + v
    if not written:
        raise ValueError(
            "nothing was scored, so nothing was written: "
            + "; ".join(f"run {r}: {why}" for r, why in skipped.items())
            + ". Turn values need runs with parsed turns that fit --max-length"
        )
    auc = vl.roc_auc(torch.tensor(means), torch.tensor(labels)) if means else float("nan")
    return ValueScoreResult(
        checkpoint=str(cfg.checkpoint),
        logs=str(logs),
        runs=written,
        rollouts=n_rollouts,
        turns_valued=n_turns,
        dropped=dropped,
        auc=None if math.isnan(auc) else auc,
        skipped=skipped,
    )


def _check_out_run(logs: Path, run: str, out_run: str) -> None:
    """Refuse an existing ``out_run`` that is not an earlier scoring of ``run``: the write
    replaces it, so a mistyped --out-run would silently swap another run's rollouts for these."""
    old = store.run_manifest(logs, out_run)
    if old is None or (old.get("value_scored") or {}).get("from_run") == run:
        return
    n = old.get("rollouts_total", old.get("rollouts_out")) or 0
    fix = "leave --out-run out to score the run in place" if out_run == run else "pick another"
    raise ValueError(
        f"--out-run {out_run!r} is an existing run ({n:,} rollouts) that `ddai value score --run "
        f"{run}` did not write; writing would replace it, so nothing was written: {fix}"
    )


def _runs_with_turns(
    logs: Path, runs: list[str], *, named: bool
) -> tuple[list[str], dict[str, str]]:
    """The runs to score and the runs skipped for lacking parsed turns (a flash reward log has
    none). A run named with ``--run`` that lacks them is an error naming the fix; without
    ``--run`` such runs are skipped and listed, and an error only when no run has turns."""
    caps = capabilities.for_runs(logs, runs)
    lacking = [r for r in runs if not caps[r].has("turns")]
    if named or len(lacking) == len(runs):
        capabilities.require(
            [caps[r] for r in lacking],
            "turns",
            needed_by="ddai value score",
            why="to value each turn",
        )
    return [r for r in runs if r not in lacking], {r: "no parsed turns" for r in lacking}
