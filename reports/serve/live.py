"""Live tail: a run that training is appending to, as the ``/live`` page polls it.

The store's version is the digest of every served run's manifest version
(``store.manifest_version``): each commit of a run (a training step's rows, an ingest, a score)
changes it. The page sends the version it shows; while it is the same the answer is one line, and
when it moves the explorer rebuilds over the new commit and the page gets the run's steps (rollouts,
mean reward and success rate per step) and its newest GRPO groups, and redraws without a reload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from ddai.pipelines import store
from ddai.pipelines.store import capabilities, io, objstore

# How many of the newest groups (run, step, prompt) the page lists.
NEWEST_GROUPS = 12

# Source formats that never record a training step, with the name the page gives them: DDAI's
# flash_rm_detail log names neither run nor step (``ddai.pipelines.adapters.flash``). Every other
# format can carry one (``capabilities.SUPPLY["step"]``).
STEPLESS_FORMATS = {"ddai-flash": "flash"}


def run_versions(logs: Path, runs: list[str] | None) -> dict[str, str]:
    """Each served run's manifest version (committed runs only, ``runs`` when given)."""
    out = {}
    for run in store.list_runs(logs):
        if runs and run not in runs:
            continue
        man = store.run_manifest(logs, run)
        if man is not None:
            out[run] = store.manifest_version(man)
    return out


def newest_run(logs: Path, runs: list[str]) -> str | None:
    """The run of ``runs`` committed last (its manifest checkpoint or log changed last): the one
    a training is most likely appending to; None for no runs."""

    url = objstore.url_of(logs)

    def changed_remote(run: str) -> float:
        # the last delta of the run's manifest log (names sort by sequence), else its checkpoint
        part = objstore.join(url, f"run_id={run}")
        deltas = [n for n in objstore.listdir(objstore.join(part, store.LOG_DIR)) if n[0].isdigit()]
        last = objstore.join(part, store.LOG_DIR, deltas[-1]) if deltas else None
        return objstore.modified(last or objstore.join(part, store.MANIFEST)) or 0.0

    def changed(run: str) -> float:
        if url is not None:  # object storage: no folder times, the objects' own
            return changed_remote(run)
        part = store.partition_dir(logs, run)
        times = []
        for f in (part / store.MANIFEST, part / store.LOG_DIR):
            try:
                times.append(f.stat().st_mtime)
            except OSError:  # a checkpoint not written yet
                continue
        return max(times, default=0.0)

    return max(runs, key=lambda r: (changed(r), r)) if runs else None


def store_version(versions: dict[str, str]) -> str:
    """One short digest of every run's manifest version: the store's version."""
    return io.sha256_text(json.dumps(versions, sort_keys=True))[:16]


STEPS_SQL = """
SELECT step, count(*) AS rollouts, count(DISTINCT uid) AS prompts, avg(reward) AS mean_reward,
    avg(success::INT) AS success_rate
FROM explorer WHERE run_id = $run GROUP BY step ORDER BY step NULLS FIRST
"""

GROUPS_SQL = """
SELECT step, uid, count(*) AS n, avg(reward) AS mean_reward, min(reward) AS min_reward,
    max(reward) AS max_reward, count(*) FILTER (WHERE success) AS successes
FROM explorer WHERE run_id = $run GROUP BY step, uid
ORDER BY step DESC NULLS LAST, uid LIMIT $top
"""


def run_tail(
    con: duckdb.DuckDBPyConnection, run: str, *, top: int = NEWEST_GROUPS
) -> dict[str, Any]:
    """``{"steps": [{step, rollouts, prompts, mean_reward, success_rate}], "groups": [newest
    ``top`` groups: {step, uid, n, mean_reward, min_reward, max_reward, successes}],
    "rollouts": n}`` of run ``run`` (steps in order, a step-less part first)."""
    steps = con.sql(STEPS_SQL, params={"run": run}).to_arrow_table().to_pylist()
    groups = con.sql(GROUPS_SQL, params={"run": run, "top": top}).to_arrow_table().to_pylist()
    return {"steps": steps, "groups": groups, "rollouts": sum(s["rollouts"] for s in steps)}


def step_source(logs: Path, run: str) -> dict[str, Any]:
    """Whether ``run``'s source formats can carry a training step: ``{"can_carry_steps": bool,
    "stepless_formats": [names]}``. False only when every format it was ingested from is
    step-less (a run with no recorded format, e.g. one training writes, can)."""
    formats = capabilities.run_capabilities(logs, run).formats
    stepless = [STEPLESS_FORMATS[f] for f in formats if f in STEPLESS_FORMATS]
    return {
        "can_carry_steps": not formats or len(stepless) < len(formats),
        "stepless_formats": stepless,
    }
