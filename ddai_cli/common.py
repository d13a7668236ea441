"""Shared CLI pieces: the common options, the summary printer and exit codes.

Every command ends with ``summary(...)``: a rich table by default, the same dict as JSON with
``--json``. Exit codes: 0 done, 1 failed, 2 bad usage or input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddai.pipelines.backends.usage import FAILED_CALLS
from ddai.pipelines.store import check_run_id

console = Console(stderr=False)
err_console = Console(stderr=True)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

LogsOpt = Annotated[
    Path | None,
    typer.Option(
        "--logs",
        metavar="DIR",
        help="Log store folder (hive-partitioned Parquet), or an s3:// / gs:// URL (credentials "
        "from the environment). Default: $DDAI_LOGS, ddai.toml `logs`, "
        "else <workspace>/logs with the workspace $DDAI_HOME or ./ddai-work.",
    ),
]


def check_run_ids(value: Any) -> Any:
    """Typer callback for run-id options: a run id that is not a safe folder name is a usage
    error (exit 2) naming the id and the characters allowed, before anything is read."""
    for v in value if isinstance(value, list | tuple) else [value]:
        if v is None:
            continue
        try:
            check_run_id(v)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    return value


RunsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--run",
        metavar="RUN",
        callback=check_run_ids,
        help="Run id to read; repeat for several. Default: every run in the store.",
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the summary as JSON instead of a table.")
]
RetryFailedOpt = Annotated[
    bool,
    typer.Option(
        "--retry-failed",
        help="Call again the model requests that failed in an earlier run. Failed calls are "
        "cached with their reason; without this flag they are reported again (exit 1), not "
        "re-sent or re-paid.",
    ),
]
ThresholdOpt = Annotated[
    float,
    typer.Option(
        "--success-threshold",
        help="A rollout succeeds when judge_score >= this and format_ok is not false.",
    ),
]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print a clear error and return the Exit to raise (``raise fail(...)``)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def exit_if_calls_failed(data: dict[str, Any]) -> None:
    """Exit 1 after the summary when model calls failed (``failed calls``: count by reason)."""
    failed = data.get(FAILED_CALLS) or {}
    if not failed:
        return
    reasons = ", ".join(f"{r}: {n}" for r, n in failed.items())
    err_console.print(
        f"[bold red]error:[/] {sum(failed.values())} model call(s) failed ({escape(reasons)}); "
        "their items carry no model result. Fix the cause, then rerun with --retry-failed.",
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_FAILED)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, dict | list):
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)


def is_main_process() -> bool:
    """False on the ranks ≥ 1 of a distributed launch (``accelerate launch``, ``torchrun`` set
    ``RANK``), which print no summary: the run's result is the main process's."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def summary(title: str, data: dict[str, Any], *, as_json: bool = False) -> None:
    """Print a command's closing summary (a two-column table, or JSON); main process only."""
    if not is_main_process():
        return
    if as_json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        return
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("key", style="bold cyan")
    table.add_column("value")
    for k, v in data.items():
        table.add_row(k, _fmt(v))
    console.print(table)
