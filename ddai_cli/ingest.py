"""CLI: ``ddai ingest``: rollout sources into the log store."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    check_run_ids,
    err_console,
    fail,
    summary,
)
from ddai.pipelines import adapters
from ddai.pipelines.store import workspace
from ddai.pipelines.store.objstore import display

if TYPE_CHECKING:
    from ddai.pipelines.ingest import IngestResult


def ingest_cmd(
    sources: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="Rollout files: ddai's JSONL/Parquet, DDAI's unified_trajectory.jsonl, "
            "flash_rm_detail.jsonl or gspo_phase1.json, or verl rollout dumps ({step}.jsonl).",
        ),
    ],
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            callback=check_run_ids,
            help="Run id for every row (wins over the rows' own run_id, "
            "which is kept as extra.source_run_id).",
        ),
    ] = None,
    logs: LogsOpt = None,
    append: Annotated[
        bool, typer.Option("--append", help="Add to the run's partition instead of replacing it.")
    ] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--input-format",
            metavar="<format>",
            help=f"Input format, per file by content when auto. One of: "
            f"{', '.join(adapters.formats())}.",
        ),
    ] = "auto",
    uid_field: Annotated[
        str | None,
        typer.Option(
            "--uid-field",
            help="verl dumps: the field of each dump line that holds the dataset id (e.g. a "
            "reward extra 'index'; dotted paths reach nested objects), so the run joins the "
            "dataset in curate/distill. Rows without it fall back to --dataset, else keep the "
            "sha1 uid, flagged uid_unmatched.",
        ),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            "--dataset",
            help="verl dumps: the dataset (verl RL parquet: id, prompt) whose prompts give the "
            "ids: a dump row's last user message must equal one dataset row's after whitespace "
            "normalization; unmatched or ambiguous rows keep the sha1 uid, flagged uid_unmatched "
            "and counted, never guessed.",
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Ingest rollout logs; unreadable rows go to _quarantine/<run>/ with a reason. The
    summary says what each run's rollouts carry and lack (turns, pages, judge, ndcg, reward, step,
    advantages, images): e.g. DDAI's flash_rm_detail logs carry no turns, so distill refuses them."""
    if fmt not in adapters.formats():
        raise fail(
            f"--input-format {fmt!r} is not known; use one of {', '.join(adapters.formats())}"
        )
    # the ingest itself (its store writer, the adapters it reads with) loads when it runs:
    # --help needs none of it
    from ddai.pipelines.adapters.hint import wrong_format_hint
    from ddai.pipelines.ingest import IngestConfig, ingest

    cfg = IngestConfig(
        sources=sources,
        logs=workspace.logs_dir(logs),
        run_id=run_id,
        append=append,
        fmt=fmt,
        progress=progress and not as_json,
        uid_field=uid_field,
        dataset=dataset,
    )
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


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
