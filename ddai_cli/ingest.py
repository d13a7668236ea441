"""CLI: ``ddai ingest``: rollout sources into the log store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ddai.cli.app import top_command
from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    bad_input_exits,
    check_run_ids,
    err_console,
    fail,
    summary,
)
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.ingest_config import IngestConfig
from ddai.pipelines.store import workspace
from ddai.pipelines.store.objstore import display

if TYPE_CHECKING:
    from ddai.pipelines.ingest import IngestResult


INGEST_FLAGS = config_flags(
    IngestConfig,
    {
        "sources": {"argument": True, "metavar": "FILE"},
        "run_id": {"decl": "--run-id", "callback": check_run_ids},
    },
)
OPTION_FLAGS = config_flags(
    IngestConfig,
    {
        "append": "--append",
        "fmt": {"decl": "--input-format", "metavar": "<format>"},
        "uid_field": "--uid-field",
        "dataset": "--dataset",
    },
)
"""``ddai ingest``'s flags: ``IngestConfig``'s fields (``--logs`` between the two groups)."""


@with_groups({"target": INGEST_FLAGS, "options": OPTION_FLAGS})
def ingest_cmd(
    *,
    target: dict[str, Any],
    logs: LogsOpt = None,
    options: dict[str, Any],
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Ingest rollout logs; unreadable rows go to _quarantine/<run>/ with a reason. The
    summary says what each run's rollouts carry and lack (turns, pages, judge, ndcg, reward, step,
    advantages, images): e.g. DDAI's flash_rm_detail logs carry no turns, so distill refuses them."""
    # the ingest itself (its store writer, the adapters it reads with) loads when it runs:
    # --help needs none of it
    from ddai.pipelines.adapters.hint import wrong_format_hint
    from ddai.pipelines.ingest import ingest

    with bad_input_exits():
        cfg = IngestConfig(
            **target,
            **options,
            logs=workspace.logs_dir(logs),
            progress=progress and not as_json,
        )
    sources, fmt = cfg.sources, cfg.fmt
    from ddai.pipelines.store import StoreConflict

    try:
        result = ingest(cfg)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    except StoreConflict as e:  # an --append raced another with the same rollouts
        raise fail(str(e), 1) from e
    except OSError as e:  # the store failed under a commit (rolled back: the message says so)
        raise fail(str(e), 1) from e
    data = {"log store": display(cfg.logs), **result.summary()}
    if as_json:  # what each run carries as counts of rollouts, not one line of text
        data["carries"] = {
            r: {n: c.count(n) for n in c.carries()} for r, c in sorted(result.capabilities.items())
        }
    hint = None
    if result.rollouts_out == 0 and fmt != "auto":
        hint = wrong_format_hint(sources, fmt)
        if hint:
            data["hint"] = hint
    # an --append retried after its commit (every run already stored) adds nothing: done
    retried = bool(result.already_stored) and result.rows_in == 0
    why = _nothing_stored(result) if result.rollouts_out == 0 and not retried else None
    if why and as_json:  # stdout stays one JSON document
        data["error"] = why
    summary("ddai ingest", data if as_json else _per_file_rows(data), as_json=as_json)
    if hint and not as_json:
        err_console.print(f"hint: {hint}", markup=False, soft_wrap=True)
    if why:
        if not as_json:
            err_console.print(f"error: {why}", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)


def _nothing_stored(result: IngestResult) -> str:
    """Why an ingest that wrote no rollout exits 1, in one line (the table above has the counts)."""
    if result.rows_in == 0:
        what = "the input holds no rollout rows"
        if result.side_tables or result.side_not_written:
            what += " (only side events: they belong to a run and are kept with its rollouts)"
        return (
            f"{what}; nothing was stored. Ingest it in one command with the log that holds the "
            "run's rollouts."
        )
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(result.quarantined.items())) or "none"
    files = ", ".join(result.quarantine_files) or "none"
    return (
        f"all {result.rows_in} rows were quarantined ({reasons}); no run was stored. "
        f"Each line's reason is in {files}."
    )


def _per_file_rows(data: dict[str, Any]) -> dict[str, Any]:
    """For the table: one row per source file (its format, then its reader's notes)."""
    # The hint goes to stderr on its own line (a table cell would cut its path).
    out = {k: v for k, v in data.items() if k not in ("formats", "notes", "hint")}
    notes = data.get("notes", {})
    for i, (path, fmt) in enumerate(data.get("formats", {}).items(), 1):
        out[f"file {i}"] = f"{fmt}: {path}"
        if path in notes:
            out[f"file {i} notes"] = notes[path]
    return out


register = top_command("ingest", ingest_cmd)
