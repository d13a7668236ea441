"""Failure attribution of low-scoring prompts (seed 000, 9.8: "search failure vs generator
bottleneck vs wrong ground truth"), over ``sql/failure_attribution.sql``.

``attribute`` returns every prompt row of the view (the class is set on low prompts only) and a
summary per run: low prompts, how many fall in each class, and the prompt lists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ddai.pipelines.analyses import carries
from ddai.pipelines.analyses.configs import AttributionConfig
from ddai.pipelines.analyses.flags import load_flags
from ddai.pipelines.records.deps import duckdb, pl
from ddai.pipelines.store import query

CLASSES = ("wrong_gt", "generator_bottleneck", "search_failure")


NEEDS = (carries.JUDGE, carries.PAGES)


def rows(con: duckdb.DuckDBPyConnection, cfg: AttributionConfig) -> pl.DataFrame:
    """The view's rows at ``cfg``'s thresholds (``review_flags`` must already be loaded)."""
    sql = "SELECT * FROM failure_attribution_at($score_max, $agree_min, $threshold)"
    params = {"score_max": cfg.score_max, "agree_min": cfg.agree_min, "threshold": cfg.threshold}
    return query.run_frame(con, sql, params)


def summarize(df: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """run → prompts, low prompts, per-class counts and uid lists (low prompts only)."""
    out: dict[str, dict[str, Any]] = {}
    for run in df["run_id"].unique(maintain_order=True).to_list():
        part = df.filter(pl.col("run_id") == run)
        low = part.filter(pl.col("low"))
        lists = {c: low.filter(pl.col("class") == c)["uid"].to_list() for c in CLASSES}
        out[run] = {
            "prompts": part.height,
            "low": low.height,
            "counts": {c: len(v) for c, v in lists.items()},
            "prompts_by_class": lists,
        }
    return out


def flagged_uids(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The uids ``load_flags`` put into ``review_flags``."""
    return {r[0] for r in con.execute("SELECT uid FROM review_flags").fetchall()}


def unmatched_flags(flagged: set[str], df: pl.DataFrame, paths: list[Path]) -> str | None:
    """Why the review flags cannot count, when none of ``flagged`` is a prompt of ``df``'s runs
    (a review of other runs' prompts), else None."""
    if not flagged or not df.height or flagged & set(df["uid"].to_list()):
        return None
    runs = ", ".join(df["run_id"].unique(maintain_order=True).to_list())
    return (
        f"--flags {', '.join(str(p) for p in paths)}: none of its {len(flagged):,} flagged uids "
        f"(first: {sorted(flagged)[0]!r}) is a prompt of run {runs} (their uids look like "
        f"{df['uid'][0]!r}), so no flag counts; pass the review of these runs' prompts"
    )


def attribute(
    logs: str | os.PathLike[str], runs: list[str] | None, cfg: AttributionConfig
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Attribute the low prompts of ``runs`` (None: every run that carries judge and pages).

    Returns the per-prompt rows and the summary (per run, plus runs skipped for what they lack).
    Raises MissingData (a ValueError) when a named run, or every run, lacks judge scores or pages,
    and a ValueError when ``cfg.flags`` flag uids none of which is a prompt of these runs (a review
    of other runs: every flag would be silently unused).
    """
    with carries.checked(logs, runs, "failure attribution", NEEDS) as (con, ok, lacking):
        n_flags = load_flags(con, cfg.flags)
        flagged = flagged_uids(con)
        df = rows(con, cfg).filter(pl.col("run_id").is_in(ok))
    matched = len(flagged & set(df["uid"].to_list()))
    unmatched = unmatched_flags(flagged, df, cfg.flags)
    if unmatched:
        raise ValueError(f"{unmatched}, or leave --flags out")
    summary: dict[str, Any] = {
        "runs": summarize(df),
        "flags loaded": n_flags,
        "flags matched": matched,
        "thresholds": {
            "score_max": cfg.score_max,
            "agree_min": cfg.agree_min,
            "success_threshold": cfg.threshold,
        },
        **carries.skipped(lacking),
    }
    return df, summary
