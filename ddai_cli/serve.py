"""CLI: ``ddai serve``: the local trajectory explorer over the log store (read-only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import LogsOpt, RunsOpt, ThresholdOpt, console, err_console, fail
from ddai.pipelines.records.schema import SUCCESS_THRESHOLD
from ddai.pipelines.store import workspace


def serve_cmd(
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            "--datasets-dir",
            help="Folder of curated datasets (files with a manifest) for the live report's funnel.",
        ),
    ] = None,
    image_root: Annotated[
        Path | None,
        typer.Option(
            "--image-root",
            help="Folder of page images named {page_id}.png or .jpg; transcripts show the pages "
            "and <bbox> crops inline. Without it pages show as their ids.",
        ),
    ] = None,
    corpus: Annotated[
        Path | None,
        typer.Option(
            "--corpus",
            help="Page corpus (pages.parquet or its folder): a page with no image under "
            "--image-root shows the corpus's image (ddai corpus build) or is drawn from its "
            "text, so the synthetic world shows pages too.",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on. Anything but loopback (127.0.0.1, ::1, localhost) needs "
            "a token.",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    allow_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A name this machine is reached by (repeatable), accepted in a request's Host "
            "header besides 127.0.0.1, localhost, ::1 and --host; any other name is refused, so "
            "a web page cannot reach the explorer by DNS rebinding.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="DDAI_SERVE_TOKEN",
            help="Access token (16+ characters; also $DDAI_SERVE_TOKEN). On a non-loopback "
            "host a random one is made when none is given; the printed URL carries it.",
        ),
    ] = None,
    page_size: Annotated[
        int, typer.Option("--page-size", help="Rows per page of the rollout table (1-500).")
    ] = 50,
    threshold: ThresholdOpt = SUCCESS_THRESHOLD,
    threads: Annotated[
        int | None, typer.Option("--threads", help="DuckDB threads. Default: one per core.")
    ] = None,
    memory_share: Annotated[
        float,
        typer.Option(
            "--memory-share",
            help="Share of the machine's memory the explorer's DuckDB may hold (its table, the "
            "pages and the SQL box together; beyond it a query spills or fails), in (0, 0.9].",
        ),
    ] = 0.25,
    sql_timeout: Annotated[
        float,
        typer.Option("--sql-timeout", help="Seconds a SQL box query may run before it stops."),
    ] = 30.0,
    annotate: Annotated[
        bool,
        typer.Option(
            "--annotate",
            help="Accept writes: labels on prompts, rollouts and turns (stored in the log store's "
            "side table annotations) and review decisions. Without it every write is refused.",
        ),
    ] = False,
    annotator: Annotated[
        str | None,
        typer.Option("--annotator", help="Who writes the labels and decisions. Default: $USER."),
    ] = None,
    review: Annotated[
        Path | None,
        typer.Option(
            "--review",
            metavar="<file>",
            help="A review.csv of `ddai curate verify-gt` to decide prompt by prompt at /review "
            "(ok / wrong / uncertain, one key each).",
        ),
    ] = None,
    decisions_out: Annotated[
        Path | None,
        typer.Option(
            "--decisions-out",
            metavar="<file>",
            help="Where /review's decisions go (uid, verdict, reason, annotator, decided_at: "
            "what verify-gt and focus --decisions read). Default: review_decisions.csv beside "
            "--review.",
        ),
    ] = None,
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

        from ddai.reports.serve import ServeConfig
        from ddai.reports.serve.app import create_app, empty_store_notice
        from ddai.reports.serve.config import EXIT_CANNOT_LISTEN, check_port
    except ImportError as e:
        raise fail(
            f"ddai serve needs the serve extra ({e.name} missing): pip install 'ddai[serve]'"
        ) from e
    try:
        cfg = ServeConfig(
            logs=workspace.logs_dir(logs, demo_fallback=True),
            runs=runs or None,
            datasets_dir=datasets_dir,
            image_root=image_root,
            corpus=corpus,
            host=host,
            port=port,
            token=token,
            page_size=page_size,
            success_threshold=threshold,
            threads=threads,
            allow_hosts=allow_hosts or [],
            memory_share=memory_share,
            sql_timeout_s=sql_timeout,
            annotate=annotate,
            annotator=annotator,
            review=review,
            decisions_out=decisions_out,
        )
        cfg.require_token()
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    try:  # a taken port fails now, not after the store and corpus have loaded
        check_port(host, port)
    except OSError as e:
        raise fail(str(e), EXIT_CANNOT_LISTEN) from e
    try:
        app = create_app(cfg)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={cfg.token}" if cfg.token else "")
    ex = app.state.explorer
    with ex.connection() as con:
        n = con.execute("SELECT count(*) FROM explorer").fetchall()[0][0]
    limit = cfg.memory_limit()
    memory = f"{limit / 2**30:.1f} GiB" if limit else "DuckDB's default (memory size unknown)"
    console.print(
        f"ddai serve: {n:,} rollouts from {cfg.logs} at {url}  (Ctrl-C stops)\n"
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
    uvicorn.run(app, host=host, port=port, log_level=os.environ.get("DDAI_SERVE_LOG", "warning"))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("serve")(serve_cmd)
