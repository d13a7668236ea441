"""CLI: ``ddai backends check`` and ``ddai judge`` (DESIGN.md, "Backends")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    check_run_ids,
    err_console,
    fail,
    print_rows,
    summary,
)
from ddai.pipelines.backends.check import check_backends
from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.rejudge import RejudgeConfig, RejudgeError, rejudge
from ddai.pipelines.store import StoreConflict, workspace

CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="Call cache file (SQLite). Default: <workspace>/cache/calls.sqlite, the workspace "
        "being $DDAI_HOME or ./ddai-work.",
    ),
]


def _backend_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per backend; the full details (base URL, key variable, ping text) are in --json."""
    out = []
    for r in rows:
        key = "-"
        if "api_key_set" in r:
            key = "set" if r["api_key_set"] else "unset"
        ping = r.get("ping")
        if ping is None:
            shown = "-"
        elif ping["ok"]:
            shown = f"ok {ping['latency_s'] * 1000:.0f} ms"
        else:
            bad = [c for c in ping.get("calls", []) if not c["ok"]]
            why = f"{bad[0]['role']} call" if bad else str(ping["detail"]).split(":", 1)[0]
            shown = f"failed ({why})"
        # A service (search-http) has no model: show where it is instead.
        model = r.get("model") or (r.get("options") or {}).get("url")
        out.append(
            {
                "name": r["name"],
                "kind": r["kind"],
                "model": model or "-",
                "roles": ", ".join(r.get("roles", [])) or "-",
                "key": key,
                "ping": shown,
            }
        )
    return out


def check_cmd(
    ping: Annotated[
        bool,
        typer.Option(
            help="Ping every remote backend with a real call: models one small uncached completion "
            "per judge or generator role using them (else a metadata call, no tokens); search "
            "services their /health route when they have one, then one query."
        ),
    ] = True,
    cache: CacheOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the configured backends and the roles using them, ping them, and show cache stats."""
    try:
        report = check_backends(ping=ping, cache=cache)
    except (ConfigError, ValueError) as e:
        raise fail(f"{e} (check the [backends] tables of ddai.toml)") from e
    failed = [r["name"] for r in report["backends"] if r.get("ping") and not r["ping"]["ok"]]
    stats = report["cache"]
    data = {
        "backends": len(report["backends"]),
        "roles": report["roles"],
        "unreachable": failed,
        "cache": stats["path"],
        "cache entries": stats["entries"],
        # written before answers were keyed on their endpoint: readable, never served
        "cache legacy entries": stats.get("legacy_entries", 0),
        "cache bytes": stats["bytes"],
    }
    if as_json:
        summary(
            "ddai backends check",
            {**data, "details": report["backends"], "cache groups": stats["groups"]},
            as_json=True,
        )
    else:
        print_rows("backends", _backend_rows(report["backends"]))
        summary("ddai backends check", data)
    if failed and not as_json:  # --json carries the same in details[].ping (detail, calls)
        for r in report["backends"]:
            if r.get("ping") and not r["ping"]["ok"]:
                roles = ", ".join(r.get("roles", [])) or "no role"
                err_console.print(
                    f"[bold red]error:[/] backend {escape(r['name'])!r} ({escape(roles)}): "
                    f"{escape(str(r['ping']['detail']))}",
                    soft_wrap=True,
                )
    if failed:
        raise typer.Exit(EXIT_FAILED)


def judge_cmd(
    run: Annotated[
        str,
        typer.Option("--run", callback=check_run_ids, help="The run whose answers to (re)score."),
    ],
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help="Judge backend name from ddai.toml [backends] (or `local`). Default: $DDAI_JUDGE, "
            "then ddai.toml [roles] judge, then local.",
        ),
    ] = None,
    logs: LogsOpt = None,
    out_run: Annotated[
        str | None,
        typer.Option(
            "--out-run",
            callback=check_run_ids,
            help="Run id to write the rescored run to. Default: <run>@<judge>.",
        ),
    ] = None,
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place", help="Write the new scores into --run itself (old ones kept in extra)."
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Count the calls and their estimated cost; call and write nothing."
        ),
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="Stop before spending more than this many USD (rerun to resume).",
            min=0,
        ),
    ] = None,
    cache: CacheOpt = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Call again the requests that failed in an earlier run (their failures are "
            "cached with the reason; without this flag they are reported again, not re-paid).",
        ),
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """(Re)score a run's answers with a judge backend. A failed call never replaces a score
    (null in a new run, the old score kept with --in-place); any failure exits 1 with the
    failures by reason."""
    if in_place and out_run:
        raise fail("--in-place and --out-run exclude each other; pick one")
    cfg = RejudgeConfig(
        logs=workspace.logs_dir(logs),
        run=run,
        judge=judge,
        out_run=out_run,
        in_place=in_place,
        dry_run=dry_run,
        max_cost=max_cost,
        cache=cache,
        progress=progress and not as_json,
        retry_failed=retry_failed,
    )
    try:
        result = rejudge(cfg)
    except (RejudgeError, ConfigError) as e:
        raise fail(str(e)) from e
    except StoreConflict as e:  # the run changed under an in-place judge: a failure, not bad input
        raise fail(str(e), EXIT_FAILED) from e
    summary("ddai judge", result.summary, as_json=as_json)
    if not result.complete:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    backends_app = typer.Typer(
        help="Model backends: list, ping, cache stats.", no_args_is_help=True, rich_markup_mode=None
    )
    backends_app.command(
        "check", short_help="List the backends and their roles, ping them, show cache stats."
    )(check_cmd)
    app.add_typer(backends_app, name="backends")
    app.command("judge")(judge_cmd)
