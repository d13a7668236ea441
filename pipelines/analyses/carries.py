"""What each run carries for an analysis, and the error that names what a run lacks.

An analysis over a run that lacks its inputs (a legacy log without judge scores, a log without
pages) must say so up front, never return an empty result: ``check`` raises ``MissingData`` (a
ValueError, so the CLI exits 2) naming the run, what is missing and what would supply it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import capabilities, query


class MissingData(ValueError):
    """A run lacks what an analysis needs."""


@dataclass(frozen=True)
class Need:
    """One input of an analysis: a test on a run's carry counts and the fix when it fails."""

    what: str
    test: Callable[[dict[str, int]], bool]
    fix: str


# The fixes are the capability table's own words (``ddai runs`` and the report say the same).
JUDGE = Need("judge scores", lambda c: c["judged"] > 0, capabilities.SUPPLY["judge"])
PAGES = Need(
    "retrieved and reference pages",
    lambda c: c["with_retrieved"] > 0 and c["with_reference"] > 0,
    capabilities.SUPPLY["pages"] + ", with the reference pages (`reference_pages`)",
)
SCORES = Need(
    "rewards or judge scores",
    lambda c: c["rewarded"] > 0 or c["judged"] > 0,
    "ingest a log with the reward manager's scores",
)
GROUPS = Need(
    "GRPO groups of two or more scored rollouts",
    lambda c: c["groups"] > 0,
    "ingest every rollout of a group (one prompt's n_agent rollouts at a step)",
)


def carries(
    con: duckdb.DuckDBPyConnection, sql: str = "analysis_carries"
) -> dict[str, dict[str, int]]:
    """run id → its carry counts (``sql/analysis_carries.sql``, counted over the log; the report
    passes ``report_carries``, the same counts from its tables)."""
    rows = query.run_frame(con, query.sql_text(sql)).to_dicts()
    return {r.pop("run_id"): r for r in rows}


def check(
    con: duckdb.DuckDBPyConnection, analysis: str, needs: tuple[Need, ...], *, strict: bool
) -> tuple[list[str], dict[str, list[str]]]:
    """Runs that carry every need, and run → what it lacks.

    ``strict`` (the user named the runs): any run lacking something raises ``MissingData``.
    Otherwise runs that lack something are skipped, and it raises only when none is left.
    """
    counts = carries(con)
    if not counts:
        raise MissingData(f"{analysis}: the log store holds no rollouts; ingest logs first")
    ok: list[str] = []
    lacking: dict[str, list[str]] = {}
    fixes: dict[str, str] = {}
    for run, c in counts.items():
        missing = [n for n in needs if not n.test(c)]
        if missing:
            lacking[run] = [n.what for n in missing]
            fixes.update({n.what: n.fix for n in missing})
        else:
            ok.append(run)
    if lacking and (strict or not ok):
        named = "; ".join(f"run {r} has no {', no '.join(w)}" for r, w in lacking.items())
        how = "; ".join(f"for {w}: {f}" for w, f in fixes.items())
        raise MissingData(f"{analysis} needs what these runs lack: {named}. To supply it: {how}")
    return ok, lacking


@contextlib.contextmanager
def checked(
    logs: str | os.PathLike[str], runs: list[str] | None, analysis: str, needs: tuple[Need, ...]
) -> Iterator[tuple[duckdb.DuckDBPyConnection, list[str], dict[str, list[str]]]]:
    """A connection to the store's ``runs`` (None: all), with ``check``'s runs that carry every
    need and run → what it lacks; strict when the user named the runs. Closed on exit."""
    con = query.connect(query.logs_or_fail(Path(logs)), runs)
    try:
        yield con, *check(con, analysis, needs, strict=bool(runs))
    finally:
        con.close()


def skipped(lacking: dict[str, list[str]]) -> dict[str, Any]:
    """A summary's ``skipped`` entry (run → what it lacks), or nothing when no run was skipped."""
    return {"skipped": {r: f"no {', no '.join(w)}" for r, w in lacking.items()}} if lacking else {}
