"""CLI: ``ddai runs``, the runs of the log store with their counts, means and capabilities.

It reads manifests and the per-run rows ``ddai.pipelines.store.run_stats`` keeps by the runs' rollout
files (written by ingest, judge and value score right after their commit), so a listing starts
without DuckDB, pyarrow or polars, also right after a commit; a run without a kept row (removed,
written by an older ddai, committed by a training run) is computed by DuckDB.
"""

from __future__ import annotations

from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import JsonOpt, LogsOpt, console, fail, print_rows, summary
from ddai.pipelines.store import capabilities, run_stats, store_read, workspace

UNKNOWN = "—"
"""A value no rollout of the run carries (``null`` in ``--json``)."""


def runs_cmd(logs: LogsOpt = None, as_json: JsonOpt = False) -> None:
    """List the runs in the log store with rollout, prompt and step counts, mean scores and what
    their rollouts carry (turns, pages, judge, ndcg, reward, step, advantages, images: the
    commands that need one refuse a run without it)."""
    try:
        root = store_read.logs_or_fail(workspace.logs_dir(logs, demo_fallback=True))
        found = run_stats.runs_rows(root)
    except (FileNotFoundError, ValueError) as e:  # ValueError: a damaged manifest, named
        raise fail(str(e)) from e
    if not found:
        if as_json:
            summary("runs", {"runs": []}, as_json=True)
        else:
            console.print(
                f"no runs in the log store {root}: add one with `ddai ingest FILE --logs {root}`",
                markup=False,
                soft_wrap=True,
            )
        return
    caps = capabilities.for_runs(root, [r["run_id"] for r in found])
    if as_json:
        rows = [{**r, **_steps(r), "capabilities": caps[r["run_id"]].to_dict()} for r in found]
        summary("runs", {"runs": rows}, as_json=True)
        return
    rows = [_run_row(r) for r in found]
    # steps, turns and the format gate go with the capabilities: the first table stays narrow
    # enough for 80 columns with run names of 30 characters
    lacks = [
        {
            "run": r["run"],
            **{k: r.pop(k) for k in ("steps", "turns", "fmt fail")},
            "lacks": ", ".join(caps[r["run"]].lacks()) or "nothing",
            "partly": _partly(caps[r["run"]]),
        }
        for r in rows
    ]
    print_rows("runs (all digits: --json)", rows)
    print_rows("steps, turns, format fails and what each run lacks", lacks)


def _steps(r: dict[str, Any]) -> dict[str, Any]:
    """``steps`` null (as the table's ``UNKNOWN``) for a run none of whose rollouts has a step:
    the view counts no distinct step as 0, which reads as a run with zero training steps."""
    return {"steps": None} if r.get("first_step") is None else {}


def _partly(c: capabilities.Capabilities) -> str:
    """What only some of a run's rollouts carry, as ``name k/n``."""
    return ", ".join(
        f"{n} {c.count(n):,}/{c.rollouts:,}" for n in c.carries() if c.count(n) < c.rollouts
    )


def _run_row(r: dict[str, Any]) -> dict[str, Any]:
    """One run for people: short column names, rates to 3 decimals (--json has all digits); an
    unknown value (no judged rollout, no format gate logged) is ``UNKNOWN``, never 0 or blank."""
    first, last = r.get("first_step"), r.get("last_step")

    def rate(k: str) -> float | str:
        return UNKNOWN if r.get(k) is None else round(r[k], 3)

    return {
        "run": r["run_id"],
        "rollouts": r.get("rollouts"),
        "prompts": r.get("prompts"),
        "steps": UNKNOWN if first is None else f"{first}-{last}",
        "success": rate("success_rate"),
        "judge": rate("mean_judge"),
        "ndcg": rate("mean_ndcg"),
        "reward": rate("mean_reward"),
        "turns": UNKNOWN if r.get("mean_turns") is None else round(r["mean_turns"], 2),
        "fmt fail": rate("format_fail_rate"),
    }


register = top_command("runs", runs_cmd)
