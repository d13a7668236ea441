"""CLI: ``ddai serve``: the local trajectory explorer over the log store (read-only)."""

from __future__ import annotations

import os
from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import LogsOpt, RunsOpt, ThresholdOpt, console, err_console, fail
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.store import objstore, workspace
from ddai.reports.serve.config import ServeConfig  # the standard library only: --help stays light

SERVE_FLAGS = config_flags(
    ServeConfig,
    {
        **dict.fromkeys(("datasets_dir", "image_root", "corpus", "host", "port")),
        "allow_hosts": {"decl": "--allow-host", "metavar": "<name>"},
        "token": {"envvar": "DDAI_SERVE_TOKEN"},
        **dict.fromkeys(("page_size", "threads", "memory_share")),
        "sql_timeout_s": "--sql-timeout",
        "annotate": None,
        "annotator": None,
        "review": {"metavar": "<file>"},
        "decisions_out": {"metavar": "<file>"},
    },
)


@with_groups({"settings": SERVE_FLAGS})
def serve_cmd(
    *,
    settings: dict[str, Any],
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    threshold: ThresholdOpt = default_of(ServeConfig, "success_threshold"),
) -> None:
    """Serve a local web explorer over every rollout: a sortable, filterable table
    (shareable URLs), GRPO group views, transcripts with page images, a live tail of a training
    run, live report sections whose counts link to their rollouts, a read-only SQL box, export of
    a filter's ids, rollout diffs; with --annotate, labels and the ground-truth review queue
    (--review).

    Exit status: 0 when stopped (Ctrl-C); 2 for bad input (a flag, a missing store, image root
    or corpus); 3 when it cannot listen on --host:--port (checked before the store loads)."""
    try:
        import uvicorn

        from ddai.reports.serve.app import create_app, empty_store_notice
        from ddai.reports.serve.config import EXIT_CANNOT_LISTEN, check_port
    except ImportError as e:
        raise fail(
            f"ddai serve needs the serve extra ({e.name} missing): pip install 'ddai[serve]'"
        ) from e
    try:
        cfg = ServeConfig(
            **settings,
            logs=workspace.logs_dir(logs, demo_fallback=True),
            runs=runs or None,
            success_threshold=threshold,
        )
        cfg.require_token()
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    try:  # a taken port fails now, not after the store and corpus have loaded
        check_port(cfg.host, cfg.port)
    except OSError as e:
        raise fail(str(e), EXIT_CANNOT_LISTEN) from e
    try:
        app = create_app(cfg)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    url = f"http://{shown}:{cfg.port}/" + (f"?token={cfg.token}" if cfg.token else "")
    ex = app.state.explorer
    with ex.connection() as con:
        n = con.execute("SELECT count(*) FROM explorer").fetchall()[0][0]
    limit = cfg.memory_limit()
    memory = f"{limit / 2**30:.1f} GiB" if limit else "DuckDB's default (memory size unknown)"
    console.print(
        f"ddai serve: {n:,} rollouts from {objstore.display(cfg.logs)} at {url}  (Ctrl-C stops)\n"
        f"  answers Host {', '.join(cfg.hosts())}; DuckDB holds at most {memory}\n"
        + (
            f"  writes labels and decisions as {cfg.annotator} (--annotate)"
            if cfg.annotate
            else "  read-only (start with --annotate to label and decide)"
        )
        + (
            f"\n  GT review of {cfg.review} at /review -> {cfg.decisions_out}" if cfg.review else ""
        ),
        markup=False,
        soft_wrap=True,
    )
    if not n:
        err_console.print(f"warning: {empty_store_notice(cfg)}", markup=False, soft_wrap=True)
    uvicorn.run(
        app, host=cfg.host, port=cfg.port, log_level=os.environ.get("DDAI_SERVE_LOG", "warning")
    )


register = top_command("serve", serve_cmd)
