"""Reward latency and coverage per run and step, over ``sql/reward_latency.sql``.

DDAI's streaming reward waits a bounded time for each group's judge calls (seed 000, 9.7.1); the
logs tell how long the calls took (``latency_s``), which timed out, and what share of rollouts got
a reward at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ddai.pipelines.analyses import carries
from ddai.pipelines.analyses.streaming import step_log
from ddai.pipelines.records.deps import pl
from ddai.pipelines.store import query

NEEDS = (carries.SCORES,)


def _run_totals(con: Any, ok: list[str]) -> pl.DataFrame:
    sql = query.sql_text("analysis_latency_runs")
    return query.run_frame(con, sql).filter(pl.col("run_id").is_in(ok))


def reward_latency(
    logs: str | os.PathLike[str], runs: list[str] | None
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Per-step rows of the view and a per-run summary (latency percentiles pooled over steps).

    Raises MissingData when a named run, or every run, has neither rewards nor judge scores.
    """
    with carries.checked(logs, runs, "reward latency", NEEDS) as (con, ok, lacking):
        steps = query.run_frame(con, "SELECT * FROM reward_latency").filter(
            pl.col("run_id").is_in(ok)
        )
        totals = _run_totals(con, ok)
    per_run = {r.pop("run_id"): r for r in totals.to_dicts()}
    for r in per_run.values():
        if not r["with_latency"]:
            r["note"] = "no reward latency logged (extra.latency_s)"
    steps = _with_step_log(Path(logs), steps, per_run)
    return steps, {"runs": per_run, **carries.skipped(lacking)}


def _with_step_log(logs: Path, steps: pl.DataFrame, per_run: dict[str, Any]) -> pl.DataFrame:
    """Add the trainer's own per-step record (unified logs): expected rollouts and the logged
    streaming coverage, null where a run has none; per run, the rollouts expected in total."""
    extra = []
    for run in per_run:
        log = step_log(logs, run)
        extra += [{"run_id": run, "step": s, **v} for s, v in log.items()]
        expected = [v["expected_rollouts"] for v in log.values() if "expected_rollouts" in v]
        if expected:
            per_run[run]["expected_rollouts"] = sum(expected)
            per_run[run]["logged_share"] = per_run[run]["rollouts"] / sum(expected)
    schema = {
        "run_id": pl.String,
        "step": steps.schema["step"],
        "expected_rollouts": pl.Int64,
        "logged_coverage": pl.Float64,
    }
    side = pl.DataFrame(extra, schema=schema) if extra else pl.DataFrame(schema=schema)
    return steps.join(side, on=["run_id", "step"], how="left")
