"""CLI: ``ddai backends check`` and ``ddai judge`` (DESIGN.md, "Backends")."""

from __future__ import annotations

from typing import Any

import typer

from ddai.cli.app import group_command, sub_app
from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RetryFailedOpt,
    bad_input_exits,
    check_run_ids,
    err_console,
    fail,
    markup,
    print_rows,
    summary,
)
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.step_configs import CheckConfig, RejudgeConfig, RejudgeError
from ddai.pipelines.store import workspace

CHECK_FLAGS = config_flags(CheckConfig, {"ping": "--ping/--no-ping", "cache": "--cache"})
CACHE_FLAG = config_flags(CheckConfig, {"cache": "--cache"})
"""The call cache flag, ``ddai judge``'s too."""
JUDGE_FLAGS = config_flags(
    RejudgeConfig,
    {
        "run": {"decl": "--run", "callback": check_run_ids},
        "judge": "--judge",
        "out_run": {"decl": "--out-run", "callback": check_run_ids},
        "in_place": "--in-place",
        "dry_run": "--dry-run",
        "max_cost": {"decl": "--max-cost", "min": 0},
    },
)


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


@with_groups({"settings": CHECK_FLAGS})
def check_cmd(*, settings: dict[str, Any], as_json: JsonOpt = False) -> None:
    """List the configured backends and the roles using them, ping them, and show cache stats."""
    from ddai.pipelines.backends.check import check_backends

    try:
        report = check_backends(**settings)
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
                    f"[bold red]error:[/] backend {markup.escape(r['name'])!r} ({markup.escape(roles)}): "
                    f"{markup.escape(str(r['ping']['detail']))}",
                    soft_wrap=True,
                )
    if failed:
        raise typer.Exit(EXIT_FAILED)


@with_groups({"settings": JUDGE_FLAGS, "cache": CACHE_FLAG})
def judge_cmd(
    *,
    settings: dict[str, Any],
    logs: LogsOpt = None,
    cache: dict[str, Any],
    retry_failed: RetryFailedOpt = False,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """(Re)score a run's answers with a judge backend. A failed call never replaces a score
    (null in a new run, the old score kept with --in-place); any failure exits 1 with the
    failures by reason."""
    with bad_input_exits():
        cfg = RejudgeConfig(
            logs=workspace.logs_dir(logs),
            **settings,
            **cache,
            progress=progress and not as_json,
            retry_failed=retry_failed,
        )
    from ddai.pipelines.backends.rejudge import rejudge
    from ddai.pipelines.store import StoreConflict

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
    group_command(sub_app(app, "backends"), "backends", "check")(check_cmd)
    app.command("judge")(judge_cmd)
