"""What every section builder receives: the DuckDB connection, the config and named-query helpers.

The per-rollout facts (``sql/report_facts.sql``) and the per-prompt outcomes (the query layer's
``prompts_at``, ``sql/report_prompts.sql``) are materialized once into temp tables; sections
aggregate those in DuckDB and pull only the small results into Python, as polars frames. A named
query's frame is kept for the build, so sections that show the same numbers (the overview and the
run comparison) run it once.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ddai.pipelines.records.deps import duckdb, pl
from ddai.pipelines.store import capabilities, kept_report_facts, query
from ddai.reports import palette
from ddai.reports.config import ReportConfig

_PARAM_RE = re.compile(r"\$([A-Za-z_]\w*)")


def bind(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``params`` that ``sql`` names as ``$name`` (DuckDB rejects extra ones)."""
    names = set(_PARAM_RE.findall(sql))
    missing = names - params.keys()
    if missing:
        raise KeyError(f"SQL parameter(s) {', '.join(sorted(missing))} not provided")
    return {k: params[k] for k in names}


def _bare(meaning: str) -> str:
    """ "a judge score" → "judge score": the note reads "carries no judge score"."""
    return re.sub(r"^an? ", "", meaning)


@dataclass
class ReportContext:
    """A report build in progress: the connection, the config, the selected runs and their
    rollout count."""

    cfg: ReportConfig
    con: duckdb.DuckDBPyConnection
    runs: list[str] = field(default_factory=list)
    rollouts: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    caps: dict[str, capabilities.Capabilities] = field(default_factory=dict)
    """Per selected run: what its rollouts carry (sections that need a field check it)."""
    valued_turns: int = 0
    """Turns valued by `ddai value score` in the selection (0: the value queries are skipped)."""
    colors: dict[str, str] = field(default_factory=dict)
    """Per selected run: its colour in every chart of the page (``color``)."""
    wide: bool = False
    """The tables are database-wide (``query.connect(wide=True)``), so every ``cursor()`` of
    ``con`` reads them: the sections then run concurrently, one cursor each (``on_cursor``)."""
    _frames: dict[tuple[Any, ...], pl.DataFrame] = field(default_factory=dict, repr=False)
    _locks: dict[tuple[Any, ...], threading.Lock] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(
        cls,
        cfg: ReportConfig,
        con: duckdb.DuckDBPyConnection,
        *,
        wide: bool = False,
        kept: list[str] | None = None,
    ) -> ReportContext:
        """Materialize the report's temp tables on ``con`` (database-wide ones with ``wide``);
        note the runs they hold. ``kept``: the facts' rows kept per part for these parameters
        (``kept_report_facts.kept``, the files of every part of ``con``'s snapshot, in order),
        read instead of computing them."""
        ctx = cls(cfg=cfg, con=con, params=cfg.sql_params(), wide=wide)
        if wide and (cfg.threads or os.cpu_count() or 1) > 1:
            # the per-prompt outcomes read the log, not the facts: built on a cursor of their
            # own meanwhile (the facts table's build keeps about one core busy)
            with ThreadPoolExecutor(1, thread_name_prefix="report-prompts") as pool:
                prompts = pool.submit(ctx._execute_on_cursor, "report_prompts")
                ctx._facts(kept)
                prompts.result()
        else:
            ctx._facts(kept)
            ctx.execute("report_prompts")
        # the round analyses' views (attribution, drop/keep) read those tables, not the log
        ctx.execute("report_analysis_sources")
        runs = ctx.frame("report_runs")
        ctx.runs = runs["run_id"].to_list()
        ctx.rollouts = int(runs["rollouts"].sum())
        ctx.valued_turns = int(runs["valued_turns"].sum())
        ctx.caps = capabilities.for_runs(cfg.logs, ctx.runs)
        ctx.colors = palette.run_colors(ctx.runs)
        return ctx

    def _facts(self, kept: list[str] | None) -> None:
        """``report_facts`` from the ``kept`` files, or computed from the log (none, or one
        unreadable: the same rows either way)."""
        if kept:
            try:
                kept_report_facts.read(self.con, kept, wide=self.wide)
                return
            except duckdb.Error:
                pass
        self.execute("report_facts")

    def on_cursor(self) -> ReportContext:
        """This context on a new cursor of its connection, for a section built on another thread
        (a DuckDB connection runs one query at a time); the named-query frames stay shared."""
        if not self.wide:
            raise ValueError("on_cursor needs a context opened with wide=True")
        return dataclasses.replace(self, con=self.con.cursor())

    def _execute_on_cursor(self, name: str) -> None:
        """``execute(name)`` on a cursor of its own, closed after (for another thread)."""
        sub = self.on_cursor()
        try:
            sub.execute(name)
        finally:
            sub.con.close()

    def color(self, run: str) -> str:
        """``run``'s colour, the same in every chart of the page."""
        return self.colors[run]

    def lacking(self, name: str) -> list[str]:
        """The selected runs none of whose rollouts carries ``name`` (a capability)."""
        return [r for r in self.runs if r in self.caps and not self.caps[r].has(name)]

    def lack_note(self, name: str, what: str, runs: list[str] | None = None) -> str:
        """One sentence: which runs (default: every selected run lacking it) lack ``name``, so
        ``what`` is not shown for them, and what would supply it."""
        runs = runs if runs is not None else self.lacking(name)
        formats = sorted({f for r in runs for f in self.caps[r].formats})
        source = f" (ingested from {', '.join(formats)})" if formats else ""
        return (
            f"Run{'s' if len(runs) > 1 else ''} {', '.join(runs)}{source} carr"
            f"{'y' if len(runs) > 1 else 'ies'} no {_bare(capabilities.MEANING[name])}, so {what} "
            f"cannot be shown for {'them' if len(runs) > 1 else 'it'}. To fill it: "
            f"{capabilities.SUPPLY[name].replace('RUN', runs[0] if runs else 'RUN')}."
        )

    def lack_notes(self, needs: tuple[str, ...], what: str) -> list[str]:
        """``lack_note`` for each of ``needs`` some selected run lacks (none: every run has all),
        so a chart that leaves a run out says which run and why instead of dropping it."""
        return [self.lack_note(n, what) for n in needs if self.lacking(n)]

    @staticmethod
    def runs_note(runs: list[str], why: str, what: str, fix: str) -> str:
        """One sentence naming ``runs`` left out of ``what`` because ``why``, and the fix."""
        many = len(runs) > 1
        return (
            f"Run{'s' if many else ''} {', '.join(runs)} {'have' if many else 'has'} {why}, so "
            f"{what} cannot be shown for {'them' if many else 'it'}. To fill it: {fix}."
        )

    def execute(self, name: str, **extra: Any) -> None:
        """Run ``sql/<name>.sql`` for its effect (e.g. a CREATE TABLE)."""
        sql = query.sql_text(name)
        if self.wide:
            sql = query.database_wide(sql)
        self.con.execute(sql, bind(sql, {**self.params, **extra}))

    def frame(self, name: str, **extra: Any) -> pl.DataFrame:
        """Run ``sql/<name>.sql`` with its parameters bound; the (small) result as polars.

        The temp tables the queries read do not change during a build, so a frame asked for
        twice with the same parameters is the first one (polars frames are immutable); sections
        built concurrently that ask for the same frame wait for the first to run it."""
        key = (name, *sorted(extra.items()))
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._frames:
                sql = query.sql_text(name)
                params = bind(sql, {**self.params, **extra})
                self._frames[key] = query.run_frame(self.con, sql, params)
        return self._frames[key]

    def by_run(self, df: pl.DataFrame) -> Iterator[tuple[str, pl.DataFrame]]:
        """``df``'s rows per run, in run order, skipping runs without rows."""
        for run in self.runs:
            part = df.filter(pl.col("run_id") == run)
            if part.height:
                yield run, part
