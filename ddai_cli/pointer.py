"""CLI: what ``ddai pointer``'s commands share (``ddai_cli/pointer_*.py``, one module per
command): the pointer selector (seed 002), from a synthetic world to evaluation.

world → embed → train --mode sft → gen → process → train --phases rce:2,clipped-group:30 → eval

The logic is ``ddai.pipelines.pointer``'s and ``ddai.trainer.pointer``'s; a flag whose text is
parsed into its field (``--temps``, ``--model NAME=CHECKPOINT``) says how (``parse``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ddai.cli.common import exit_if_calls_failed, summary


def with_vqa(run: Callable[..., Any], cfg: Any, retry_failed: bool) -> dict[str, Any]:
    """``run(cfg, vqa_model=...)``'s summary (``run_gen``, or ``run_eval``'s second value) with
    the VQA calls that failed, by reason (the command then exits 1)."""
    from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
    from ddai.pipelines.pointer.vqa import resolve_vqa

    if retry_failed and getattr(cfg, "force", True) is False:
        # an unchanged output holds the failed calls' items: the retry must rewrite it
        cfg = dataclasses.replace(cfg, force=True)
    model = resolve_vqa(
        cfg.vqa, max_cost=cfg.max_cost, retry_failed=retry_failed, needs_key=not cfg.dry_run
    )
    out = run(cfg, vqa_model=model)
    data = out[1] if isinstance(out, tuple) else out
    failed = failed_calls(model.usage()) if hasattr(model, "usage") else {}
    return {**data, FAILED_CALLS: failed} if failed else data


def vqa_summary(title: str, data: dict[str, Any], *, dry_run: bool, as_json: bool) -> None:
    """The closing summary of a command that called the VQA model; exit 1 if calls failed."""
    summary(title + (" (dry run)" if dry_run else ""), data, as_json=as_json)
    exit_if_calls_failed(data)


VQA_FIELDS = ("vqa", "metric", "correct_threshold", "max_cost", "dry_run")
"""``VqaStep``'s flags, the same in ``gen`` and ``eval``."""
INPUTS = {"store": "--store", "world": "--world"}
OUT = {"decl": ("--out", "-o"), "metavar": "<file>"}
