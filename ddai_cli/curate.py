"""CLI: what ``ddai curate``'s steps share (``ddai_cli/curate_*.py``, one module per step, and
``ddai_cli/lineage.py``): the common flag spellings and ``run_step``, which runs a step and turns
bad input into a clear error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ddai.cli.common import check_run_ids, err_console, fail
from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import workspace

T = TypeVar("T")

RUN = {"decl": "--run", "metavar": "<run>", "callback": check_run_ids}
DECISIONS = {"metavar": "<csv>"}
OUT_DIR = {"decl": "--out-dir", "metavar": "<dir>"}
OUT = {"decl": ("--out", "-o"), "metavar": "<file>"}


def run_step(label: str, fn: Callable[[], T], *, spinner: bool = True) -> T:
    """Run one step under a spinner, turning bad input into a clear error (exit 2)."""
    try:
        if not spinner:
            return fn()
        with err_console.status(f"{label}…"):
            return fn()
    except (ValueError, FileNotFoundError, KeyError, duckdb.Error) as e:
        raise fail(str(e).strip("'\"")) from e


def logs_for_runs(logs: Path | None, runs: list[str] | None) -> Path | None:
    """The log store a step reads when it is given runs, else none."""
    return workspace.logs_dir(logs) if runs else None
