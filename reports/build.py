"""``build_report``: the rollout logs → one self-contained HTML report, written atomically."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ddai.pipelines import store
from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import (
    io,
    kept_report_facts,
    manifest,
    objstore,
    query,
    store_read,
    turn_facts,
)
from ddai.reports import value_sft_files
from ddai.reports.blocks import Download, Note, Section, SectionBuilder
from ddai.reports.config import ReportConfig
from ddai.reports.context import ReportContext
from ddai.reports.render import render_page, warm_plotly_js


def _check_inputs(cfg: ReportConfig) -> None:
    query.logs_or_fail(cfg.logs)
    # object storage through objstore: a URL stays a URL (pathlib would print s3:/…)
    missing = [objstore.display(p) for p in cfg.datasets if not objstore.any_isfile(p)]
    for p in missing:  # a missing bucket named as that, not as missing files
        objstore.require_bucket_of(p)
    if missing:
        raise FileNotFoundError(
            f"--datasets file(s) not found: {', '.join(missing)}; pass curated dataset files "
            "(outputs of ddai curate)"
        )
    missing_flags = [objstore.display(p) for p in cfg.flags if not objstore.any_isfile(p)]
    for p in missing_flags:
        objstore.require_bucket_of(p)
    if missing_flags:
        raise FileNotFoundError(
            f"--flags file(s) not found: {', '.join(missing_flags)}; pass review CSVs "
            "(uid, verdict, reason)"
        )
    if cfg.datasets_dir is not None and not objstore.any_isdir(cfg.datasets_dir):
        where = objstore.display(cfg.datasets_dir)
        raise FileNotFoundError(f"--datasets-dir {where} is not a folder")
    value_sft_files.check(cfg.value_sft)


STEP = "report"
_NOT_PARAMS = ("out", "progress", "threads")


def _params(cfg: ReportConfig) -> dict[str, Any]:
    """What shapes the page: every setting but where it goes and how it is shown while built."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_PARAMS}


def _inputs(cfg: ReportConfig, runs: list[str]) -> list[Any]:
    """The run partitions read, and the dataset and flag files given."""
    return [
        *(store.partition_dir(cfg.logs, r) for r in runs),
        *cfg.datasets,
        *cfg.flags,
        *value_sft_files.inputs(cfg.value_sft),
    ]


def _title(cfg: ReportConfig, runs: list[str]) -> str:
    if cfg.title:
        return cfg.title
    named = ", ".join(runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
    return f"ddai report: {named}"


def _registered() -> tuple[tuple[tuple[str, SectionBuilder], ...], tuple[str, ...]]:
    """The registered sections and the longest of them (``reports/sections/__init__.py``). Their
    modules load plotly and polars (0.3-0.5 s at a command's start): ``_build`` loads them while
    DuckDB builds the facts, which holds no GIL."""
    from ddai.reports.sections import LONGEST, SECTIONS

    return SECTIONS, LONGEST


def _sections(
    ctx: ReportContext,
    sections: tuple[tuple[str, SectionBuilder], ...],
    done: Callable[[], None],
    longest: tuple[str, ...],
) -> list[tuple[Section, float]]:
    """Every section built, each on a cursor of its own, ``--threads`` at once (default: one per
    core; DuckDB releases the GIL while a query runs, so one section's queries overlap another's
    Python). Returned in ``sections`` order, the page the same whatever the order they finish
    in, each with its seconds (overlapping: they do not add up to the stage's wall time).
    ``done`` is called as each finishes."""

    def one(builder: SectionBuilder) -> tuple[Section, float]:
        sub = ctx.on_cursor()
        t0 = time.perf_counter()
        try:
            return builder(sub), time.perf_counter() - t0
        finally:
            sub.con.close()

    if ctx.cfg.datasets or ctx.cfg.datasets_dir is not None:
        # The funnel section reads the datasets' Parquet footers through pyarrow, which imports
        # numpy; plotly's encoder in another section then finds a half-initialised numpy in
        # sys.modules (AttributeError on numpy.ndarray). Loaded here, before the threads; a
        # report without datasets imports neither.
        import pyarrow.parquet  # noqa: F401
    if ctx.cfg.flags:
        # The attribution section's flags table (``pa.table``) imports pandas, which plotly's
        # validators look up in sys.modules from the other threads: loaded here too. `ddai
        # report` itself runs without pandas (``lazy.run_without``): then nothing imports it.
        with contextlib.suppress(ModuleNotFoundError):
            import pandas  # noqa: F401

    workers = max(1, min(len(sections), ctx.cfg.threads or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="report-section") as pool:
        # the longest first (a stable sort: the rest in page order); results in page order
        start = sorted(range(len(sections)), key=lambda i: sections[i][0] not in longest)
        futures = {i: pool.submit(one, sections[i][1]) for i in start}
        for f in futures.values():
            f.add_done_callback(lambda _: done())
        return [futures[i].result() for i in range(len(sections))]


def _build(
    cfg: ReportConfig,
    con: duckdb.DuckDBPyConnection,
    sections: tuple[tuple[str, SectionBuilder], ...] | None,
    kept: list[str] | None = None,
) -> tuple[list[Section], list[str], dict[str, float]]:
    """Every section, then the page; returns the sections, the runs and seconds per stage.
    ``kept``: the facts' rows kept per part (``ReportContext.open``)."""
    progress = Progress(
        TextColumn("[bold]report[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not cfg.progress,
    )
    built: list[Section] = []
    timings: dict[str, float] = {}
    # plotly.js is packed (~0.5 s of gzip) while the queries run, not after them
    packing = warm_plotly_js()
    with progress:
        task = progress.add_task("reading rollouts", total=None)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(1, thread_name_prefix="report-facts") as pool:
            opening = pool.submit(ReportContext.open, cfg, con, wide=True, kept=kept)
            # the section modules load meanwhile (imports hold the GIL, DuckDB's queries do not)
            registered, longest = _registered()
            sections = registered if sections is None else sections
            import polars  # noqa: F401 (loaded here, not by the first frame after the facts)

            ctx = opening.result()
        timings["facts"] = time.perf_counter() - t0
        progress.update(task, total=len(sections) + 2)
        if not ctx.runs:
            raise ValueError(
                f"no rollouts in {cfg.logs}"
                + (f" for run(s) {', '.join(cfg.runs)}" if cfg.runs else "")
                + "; ingest logs first (ddai ingest FILE) or pick other --run"
            )
        if cfg.compare and not set(cfg.compare) <= set(ctx.runs):
            missing = sorted(set(cfg.compare) - set(ctx.runs))
            raise ValueError(
                f"--compare run(s) {', '.join(missing)} not in the log store "
                f"(runs: {', '.join(ctx.runs)})"
            )
        record = manifest.start(STEP, _params(cfg), _inputs(cfg, ctx.runs))
        progress.advance(task)
        progress.update(task, description="sections")
        for section, seconds in _sections(ctx, sections, lambda: progress.advance(task), longest):
            built.append(section)
            timings[section.id] = seconds
        progress.update(task, description="writing")
        t0 = time.perf_counter()
        packing.join()
        html = render_page(
            title=_title(cfg, ctx.runs),
            sections=built,
            runs=ctx.runs,
            logs=objstore.display(cfg.logs),
            created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            version=manifest.ddai_version(),
        )
        io.write_text(cfg.out, html)
        # The page's manifest (inputs, parameters, the page's hash) is written last: the commit.
        manifest.write(cfg.out, record)
        timings["render"] = time.perf_counter() - t0
        progress.advance(task)
    return built, ctx.runs, timings


def _is_empty(section: Section) -> bool:
    """A section of notes alone: no figure, table or partial drawn from data."""
    return all(isinstance(b, Note | Download) for b in section.blocks)


def _why_empty(section: Section) -> str:
    """What the page says of an empty section: its notes, else its reading."""
    return " ".join(b.text for b in section.blocks if isinstance(b, Note)) or section.reading


def build_report(
    cfg: ReportConfig, *, sections: tuple[tuple[str, SectionBuilder], ...] | None = None
) -> dict[str, Any]:
    """Build the report ``cfg`` describes and write it to ``cfg.out``; returns a summary.

    ``sections``: the sections to build (default: the registered ones, ``SECTIONS`` of
    ``reports/sections/__init__.py``, the longest started first).

    The summary holds the output path and size, the runs and counts, every section's ``stats``
    (as embedded in the page) and ``timings``: seconds per stage (facts, each section, render).

    Raises FileNotFoundError for a missing log store, run or dataset, and ValueError when the
    selection holds no rollouts or ``--compare`` names a run outside it.
    """
    started = time.perf_counter()
    _check_inputs(cfg)
    # each part's turn facts are computed once and kept; the report reads them from then on
    turn_facts.ensure(cfg.logs, cfg.runs, threads=cfg.threads)
    with store_read.snapshot(cfg.logs, cfg.runs) as snap:
        # and the report's facts, once per part and parameter set (``kept_report_facts``)
        kept = kept_report_facts.kept(snap, cfg.sql_params(), threads=cfg.threads)
        # database-wide tables: every section reads them from a cursor of its own
        con = query.connect(cfg.logs, threads=cfg.threads, kept_facts=True, wide=True, snap=snap)
        try:
            built, runs, timings = _build(cfg, con, sections, kept)
        finally:
            con.close()
    stats = {s.id: s.stats for s in built}
    total = stats.get("overview", {}).get("total", {})
    return {
        "out": objstore.display(cfg.out),
        "bytes": objstore.any_size(cfg.out),
        "runs": runs,
        "prompts": total.get("prompts"),
        "rollouts": total.get("rollouts"),
        "sections": [s.id for s in built],
        # drawn from nothing: each says why (its notes) and which input would fill it
        "sections without data": {s.id: _why_empty(s) for s in built if _is_empty(s)},
        "browser rows": stats.get("browser", {}).get("shown"),
        "seconds": round(time.perf_counter() - started, 2),
        "stats": stats,
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }
