"""Shared CLI pieces: the common options, the summary printer and exit codes.

Every command ends with ``summary(...)``: aligned key/value lines for people, the same dict as
JSON with ``--json`` (snake_case keys, numbers as numbers, lists as lists, paths as strings;
``docs/schemas/`` holds each command's shape). Exit codes: 0 done, 1 failed, 2 bad usage or input.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ddai.cli import plain_text
from ddai.pipelines.records.lazy import lazy_module

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

# rich's console, tables and markup (~20 ms): loaded when a command prints, not for its --help
box = lazy_module("rich.box")
cells = lazy_module("rich.cells")
markup = lazy_module("rich.markup")
rich_console = lazy_module("rich.console")
rich_table = lazy_module("rich.table")
rich_text = lazy_module("rich.text")


class _Console:
    """A rich ``Console`` made at its first use (``console.print``, ``console.width``)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def _real(self) -> Console:
        if self._console is None:
            self._console = rich_console.Console(stderr=self._stderr)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def status(self, label: str, **kw: Any) -> Any:
        """rich's spinner on a terminal; elsewhere (a script's log, a pipe) a context that does
        nothing, as rich's transient spinner draws nothing there: without loading its live
        display (~7 ms) or starting its refresh thread, nor rich itself (``plain``)."""
        if self.plain():
            return nullcontext()
        real = self._real()
        if not (real.is_terminal or real.is_jupyter):
            return nullcontext()
        return real.status(label, **kw)

    def plain(self) -> bool:
        """Whether rich would write plain text here (no terminal by rich's own rules, no
        Jupyter, IDLE or Windows console), told without loading rich (~15 ms CPU)."""
        if self._console is not None:
            real = self._console
            return not (real.is_terminal or real.is_jupyter or real.legacy_windows)
        stream = sys.stderr if self._stderr else sys.stdout
        return plain_text.no_terminal(stream)


console: Console = _Console(stderr=False)  # type: ignore[assignment]
err_console: Console = _Console(stderr=True)  # type: ignore[assignment]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

LogsOpt = Annotated[
    Path | None,
    typer.Option(
        "--logs",
        metavar="<dir>",
        help="Log store folder (hive-partitioned Parquet), or an s3:// / gs:// URL (credentials "
        "from the environment). Default: $DDAI_LOGS, ddai.toml `logs`, "
        "else <workspace>/logs with the workspace $DDAI_HOME or ./ddai-work.",
    ),
]


def check_run_ids(value: Any) -> Any:
    """Typer callback for run-id options: a run id that is not a safe folder name is a usage
    error (exit 2) naming the id and the characters allowed, before anything is read."""
    given = [v for v in (value if isinstance(value, list | tuple) else [value]) if v is not None]
    if not given:  # a group's callback runs for its sub-command's --help too: nothing to check
        return value
    from ddai.pipelines.store.store_read import check_run_id  # the store's modules: not for --help

    for v in given:
        try:
            check_run_id(v)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    return value


RunsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--run",
        metavar="<run>",
        callback=check_run_ids,
        help="Run id to read; repeat for several. Default: every run in the store.",
    ),
]
ProgressOpt = Annotated[
    bool, typer.Option("--progress/--no-progress", help="Show progress bars (on stderr).")
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


def choices(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A flag's choices as the ``StrEnum`` typer lists in ``--help`` and checks (exit 2 on
    another value), from the library's own tuple of values; members are named like the values
    with ``-`` as ``_`` (``choices("Rewrite", ("think-only", "none")).think_only``)."""
    return StrEnum(name, {v.replace("-", "_"): v for v in values})


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print a clear error and return the Exit to raise (``raise fail(...)``).

    Called while an exception is handled (``except …: raise fail(str(e))``), an object store's
    setup fault in its chain (a missing bucket, no credentials, an unreachable endpoint) is said
    as what to fix instead of the client's own words (``objstore.setup_error``), a usage error
    (exit 2) whatever ``code`` the command gave the failure."""
    if (handled := sys.exception()) is not None:
        from ddai.pipelines.store.objstore import setup_error

        if (why := setup_error(handled)) is not None:
            message, code = why, EXIT_BAD_INPUT
    err_console.print(f"[bold red]error:[/] {markup.escape(message)}", soft_wrap=True)
    return typer.Exit(code)


@contextmanager
def bad_input_exits(code: int = EXIT_BAD_INPUT) -> Iterator[None]:
    """Bad input inside the block (a config's check, a missing or existing file: ``ValueError``,
    ``FileNotFoundError``, ``FileExistsError``) exits ``code`` (2) with its message; for
    commands that build a config and run it in one step (``running.run_or_fail`` calls one
    function the same way)."""
    try:
        yield
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        raise fail(str(e), code) from e


def exit_if_calls_failed(data: dict[str, Any]) -> None:
    """Exit 1 after the summary when model calls failed (``failed calls``: count by reason)."""
    # Imported here: the backends package pulls numpy and asyncio (~0.3 s), which `ddai runs`
    # and `ddai query` (they import this module) never need.
    from ddai.pipelines.backends.usage import FAILED_CALLS

    failed = data.get(FAILED_CALLS) or {}
    if not failed:
        return
    reasons = ", ".join(f"{r}: {n}" for r, n in failed.items())
    err_console.print(
        f"[bold red]error:[/] {sum(failed.values())} model call(s) failed ({markup.escape(reasons)}); "
        "their items carry no model result. Fix the cause, then rerun with --retry-failed.",
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_FAILED)


def json_key(key: Any) -> str:
    """A summary key as JSON spells it: labels (``"skipped (unchanged)"``, ``"bucket 0 verified"``)
    become snake_case (``skipped_unchanged``, ``bucket_0_verified``); identifiers used as keys (run
    ids, field names such as ``frozen.response``, file paths) are kept as they are."""
    k = str(key)
    if _IDENT.fullmatch(k) or ("/" in k and " " not in k):
        return k
    return re.sub(r"[^0-9a-z]+", "_", k.lower()).strip("_") or "_"


_IDENT = re.compile(r"[A-Za-z0-9_.:+@=\-]+")  # run ids (letters, digits, . _ - : + @), hive names


# Maps whose keys are values from the data (reasons, verdicts, command names, file paths), not
# field names: their keys are kept exactly as written (a quarantine reason reads the same in the
# summary and in _quarantine/<run>/). Named by the map's own (snake_case) key.
DATA_MAPS = frozenset(
    {"failed_calls", "dropped", "formats", "notes", "usage", "proposals", "gt_proposals"}
    | {"recommend"}  # curate plan's, by bucket name: the names its rows' `bucket` holds
)
DATA_MAP_SUFFIXES = ("by_reason", "by_verdict")


def json_shape(v: Any, *, data_keys: bool = False) -> Any:
    """``v`` in the one JSON shape of every ``--json``: snake_case keys (``json_key``; the keys of
    ``DATA_MAPS`` as written), numbers as numbers (NaN and infinities as null), lists as lists,
    paths and other objects as strings."""
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, x in v.items():
            key = str(k) if data_keys else json_key(k)
            inner = key in DATA_MAPS or key.endswith(DATA_MAP_SUFFIXES)
            out[key] = json_shape(x, data_keys=inner)
        return out
    if isinstance(v, list | tuple | set | frozenset):
        return [
            json_shape(x) for x in (sorted(v, key=str) if isinstance(v, set | frozenset) else v)
        ]
    if isinstance(v, bool | int | str) or v is None:
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if hasattr(v, "item") and callable(v.item):  # numpy / torch scalars
        return json_shape(v.item())
    return str(v)


def human(v: Any) -> str:
    """One value for people: floats to 4 significant digits, integers with thousands separators,
    lists comma-separated; paths and strings in full (never cut)."""
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, float):
        return f"{v:,.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list | tuple | set | frozenset):
        return ", ".join(human(x) for x in v) if v else "none"
    return str(v)


def megabytes(n: int) -> str:
    """A byte count for people: ``2,150,000`` → ``"2.1 MB"``."""
    return f"{n / 1e6:,.1f} MB"


def kv_lines(data: dict[str, Any], indent: int = 2) -> list[str]:
    """``data`` as aligned ``key  value`` lines; nested dicts become indented sub-lines."""
    width = max((len(str(k)) for k in data), default=0)
    lines: list[str] = []
    for k, v in data.items():
        if isinstance(v, dict) and v:
            lines.append(" " * indent + str(k))
            lines += kv_lines(v, indent + 2)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            lines.append(" " * indent + str(k))  # one line per item: "- key value, key value"
            for x in v:
                items = ", ".join(f"{a} {human(b)}" for a, b in x.items())
                lines.append(" " * (indent + 2) + f"- {items}")
        elif isinstance(v, list) and len(v) > 1:
            # A list that does not fit on the line goes one item per line, aligned.
            pad = " " * indent + " " * width + "  "
            if len(pad) + len(human(v)) <= console.width:
                lines.append(" " * indent + f"{k!s:<{width}}  {human(v)}")
            else:
                lines.append(" " * indent + f"{k!s:<{width}}  {human(v[0])},")
                lines += [
                    pad + human(x) + ("," if i < len(v) - 2 else "") for i, x in enumerate(v[1:])
                ]
        else:
            shown = human(v) if v != {} else "none"
            if str(k).endswith("bytes") and isinstance(v, int) and not isinstance(v, bool):
                # a size for people under a label that says so; --json keeps the byte count
                k, shown = str(k)[: -len("bytes")] + "size", megabytes(v)
            lines.append(" " * indent + f"{k!s:<{width}}  {shown}")
    return lines


def rows_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """``rows`` as a table whose cells never wrap or cut (numbers rounded by ``human``).

    Title, headers and cells are ``Text``: a value prints as it is (``[/x]`` or ``:smile:`` in a
    query's output is no markup or emoji; as markup ``[/x]`` raised), and no cell is parsed."""
    table = rich_table.Table(
        title=rich_text.Text(title, style="table.title", no_wrap=True, overflow="ignore"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    first = rows[0] if rows else {}
    for col in first:
        # right-aligned when the column holds a number (another row's may be unknown, "—")
        numeric = any(
            isinstance(r.get(col), int | float) and not isinstance(r.get(col), bool) for r in rows
        )
        table.add_column(rich_text.Text(col), justify="right" if numeric else "left", no_wrap=True)
    for r in rows:
        table.add_row(*(rich_text.Text("" if v is None else human(v)) for v in r.values()))
    return table


def fits(table: Table) -> bool:
    """Whether ``table`` prints at the console's width with no cell wrapped or cut."""
    natural = console.measure(table, options=console.options.update_width(1_000_000)).maximum
    return natural <= console.width


def width_bound(rows: list[dict[str, Any]]) -> int:
    """An upper bound of ``rows_table(rows)``'s natural width: per column its widest header or
    cell plus 2 of padding and 1 of rule. Cheap next to ``fits`` (rich measures every cell twice
    there): only a table whose bound exceeds the console needs that."""
    if not rows:
        return 0
    widths = [cells.cell_len(str(k)) for k in rows[0]]
    for r in rows:
        for i, v in zip(range(len(widths)), r.values(), strict=False):
            widths[i] = max(widths[i], cells.cell_len("" if v is None else human(v)))
    return sum(widths) + 3 * len(widths)


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    """Rows for people at any terminal width: a table when every cell fits uncut, else one block
    per row (its first value as the heading, the rest as ``key  value`` lines), so no value is
    ever shortened to ``…``."""
    table = rows_table(title, rows)
    if width_bound(rows) <= console.width or fits(table):
        console.print(table)
        return
    console.print(title, style="bold", markup=False, highlight=False)
    for r in rows:
        (_, head), *rest = r.items()
        console.print(human(head), style="bold cyan", markup=False, highlight=False, soft_wrap=True)
        for line in kv_lines({k: v for k, v in rest if v not in (None, "", [], {})}):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def is_main_process() -> bool:
    """False on the ranks ≥ 1 of a distributed launch (``accelerate launch``, ``torchrun`` set
    ``RANK``), which print no summary: the run's result is the main process's."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def summary(title: str, data: dict[str, Any], *, as_json: bool = False) -> None:
    """Print a command's closing summary; main process only.

    People get the title, then one ``key  value`` line per entry (nested dicts indented, numbers
    rounded, paths in full: a long line wraps in the terminal, it is never cut). ``--json`` gets
    the same entries in the one JSON shape (``json_shape``) with full precision."""
    if not is_main_process():
        return
    if as_json:
        typer.echo(json.dumps(json_shape(data), indent=2, ensure_ascii=False))
        return
    lines = kv_lines(data)
    if console.plain() and plain_text.fits(title, lines):  # what rich would write, without rich
        sys.stdout.write("".join(f"{x}\n" for x in (title, *lines)))
        sys.stdout.flush()
        return
    console.print(title, style="bold", markup=False, highlight=False)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
