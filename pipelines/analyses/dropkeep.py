"""Zero-variance GRPO groups and the prompts to drop or keep, over ``sql/zero_variance.sql``.

A group whose rollouts all scored the same has zero advantage: it costs rollouts and judge calls
and teaches nothing. A prompt all of whose groups were constant is a drop candidate (with why);
one with any reward variance is kept.
"""

from __future__ import annotations

import os
from typing import Any

from ddai.pipelines.analyses import carries
from ddai.pipelines.records.deps import pl
from ddai.pipelines.store import query

NEEDS = (carries.SCORES, carries.GROUPS)


def drop_keep(
    logs: str | os.PathLike[str], runs: list[str] | None
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """(per-prompt decisions, zero-variance groups, summary per run).

    Raises MissingData when a named run, or every run, has no group of two scored rollouts.
    """
    with carries.checked(logs, runs, "drop/keep", NEEDS) as (con, ok, lacking):
        decisions = query.run_frame(con, "SELECT * FROM drop_keep")
        groups = query.run_frame(con, "SELECT * FROM zero_variance_groups")
    decisions = decisions.filter(pl.col("run_id").is_in(ok))
    groups = groups.filter(pl.col("run_id").is_in(ok))
    per_run: dict[str, Any] = {}
    for run in ok:
        d = decisions.filter(pl.col("run_id") == run)
        per_run[run] = {
            "prompts": d.height,
            "groups": int(d["groups"].sum()),
            "zero_variance_groups": int(d["zero_variance_groups"].sum()),
            "keep": d.filter(pl.col("decision") == "keep").height,
            "drop": {
                reason: d.filter(pl.col("reason") == reason).height
                for reason in ("always_zero", "always_full", "constant")
            },
        }
    return decisions, groups, {"runs": per_run, **carries.skipped(lacking)}
