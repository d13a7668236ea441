"""CLI: ``ddai curate`` (bucket, verify-gt, focus, plan) and ``ddai lineage FILE``.

Each command's flags are its step's config (``pipelines/funnel/configs.py``: types, defaults and
help from the fields), parsed into that config; the command runs the step and prints its summary.
A step whose inputs and parameters are unchanged is skipped (``--force`` reruns).

Longer than 400 lines because it holds the funnel's four steps and ``lineage``, each with the
summary its people read; the logic is ``ddai.pipelines.funnel``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from ddai.cli.app import COMMANDS
from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RetryFailedOpt,
    ThresholdOpt,
    bad_input_exits,
    check_run_ids,
    err_console,
    exit_if_calls_failed,
    fail,
    print_rows,
    summary,
)
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.funnel import configs
from ddai.pipelines.funnel.configs import BucketConfig, FocusConfig, PlanConfig, VerifyConfig
from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.store import workspace

# the steps load when a command runs; --help reads only their configs (pipelines/funnel/configs.py)
bucket = lazy_module("ddai.pipelines.funnel.bucket")
focus = lazy_module("ddai.pipelines.funnel.focus")
lineage = lazy_module("ddai.pipelines.funnel.lineage")
plan = lazy_module("ddai.pipelines.funnel.plan")
verify_gt = lazy_module("ddai.pipelines.funnel.verify_gt")


T = TypeVar("T")

curate_app = typer.Typer(
    name="curate",
    help=COMMANDS["curate"].help,
    no_args_is_help=True,
    rich_markup_mode=None,
)


RUN = {"decl": "--run", "metavar": "<run>", "callback": check_run_ids}
DECISIONS = {"metavar": "<csv>"}
OUT_DIR = {"decl": "--out-dir", "metavar": "<dir>"}
OUT = {"decl": ("--out", "-o"), "metavar": "<file>"}

BUCKET_FLAGS = config_flags(
    BucketConfig,
    {
        "dataset": None,
        "out": OUT_DIR,
        "runs": RUN,
        "scores": None,
        "score_col": None,
        "metric": None,
        "agg": None,
        "mastered": None,
        "floor": None,
        "force": None,
    },
)
VERIFY_FLAGS = config_flags(
    VerifyConfig,
    {
        "dataset": None,
        "out": OUT_DIR,
        "runs": RUN,
        "select": {"metavar": "<rule>"},
        "ndcg_min": None,
        "low_score_max": None,
        "verifier": None,
        "corpus": None,
        "decisions": DECISIONS,
        "trust_verifier": None,
        "dry_run": None,
        "max_cost": None,
        "skip_preflight": None,
        "force": None,
    },
)
FOCUS_FLAGS = config_flags(
    FocusConfig,
    {
        "out": OUT,
        "runs": RUN,
        "bucket_a": None,
        "bucket_0": None,
        "hard_max": None,
        "prev": None,
        "score_max": None,
        "decisions": DECISIONS,
        "force": None,
    },
)
PLAN_FLAGS = config_flags(
    PlanConfig,
    {
        "runs": RUN,
        "n_agent": {"metavar": "<n>"},
        "max_turns": None,
        "target": None,
        "prior": None,
        "buckets": {"decl": "--bucket", "metavar": "<file>"},
        "price_per_call": None,
    },
)
LINEAGE_FLAGS = config_flags(
    configs.LineageConfig, {"files": {"argument": True, "metavar": "FILE"}, "check": None}
)
PLAN_OUT_FLAGS = config_flags(PlanConfig, {"out": OUT})


def _run(label: str, fn: Callable[[], T], *, spinner: bool = True) -> T:
    """Run one step under a spinner, turning bad input into a clear error (exit 2)."""
    try:
        if not spinner:
            return fn()
        with err_console.status(f"{label}…"):
            return fn()
    except (ValueError, FileNotFoundError, KeyError, duckdb.Error) as e:
        raise fail(str(e).strip("'\"")) from e


def _logs(logs: Path | None, runs: list[str] | None) -> Path | None:
    return workspace.logs_dir(logs) if runs else None


@curate_app.command(
    "bucket", short_help="Split a dataset into buckets B / A / 0 by a per-prompt score."
)
@with_groups({"flags": BUCKET_FLAGS})
def bucket_cmd(*, flags: dict[str, Any], logs: LogsOpt = None, as_json: JsonOpt = False) -> None:
    """Split a dataset into buckets B / A / 0 by a per-prompt score (DDAI's curriculum buckets)."""
    with bad_input_exits():
        cfg = BucketConfig(**flags, logs=_logs(logs, flags["runs"]))
    result = _run("bucketing", lambda: bucket.run_bucket(cfg))
    summary("ddai curate bucket", result.to_dict(), as_json=as_json)


@curate_app.command("verify-gt", short_help="Propose ground-truth errors for review.")
@with_groups({"flags": VERIFY_FLAGS})
def verify_gt_cmd(
    *,
    flags: dict[str, Any],
    logs: LogsOpt = None,
    retry_failed: RetryFailedOpt = default_of(VerifyConfig, "retry_failed"),
    progress: ProgressOpt = default_of(VerifyConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Propose ground-truth errors for review; exclude only what a person (or --trust-verifier)
    decided is wrong or uncertain."""
    with bad_input_exits():
        cfg = VerifyConfig(
            **flags,
            logs=_logs(logs, flags["runs"]),
            retry_failed=retry_failed,
            progress=progress and not as_json,
        )
    # No spinner here: the verifier backend shows its own progress bar.
    result = _run("verifying", lambda: verify_gt.run_verify(cfg), spinner=False)
    summary("ddai curate verify-gt", result.to_dict(), as_json=as_json)
    if note := result.summary.get("verifier note"):
        err_console.print(f"warning: {note}", markup=False, soft_wrap=True)
    exit_if_calls_failed(result.summary)


@curate_app.command("focus", short_help="Build the next focused round: hard A + verified bucket 0.")
@with_groups({"flags": FOCUS_FLAGS})
def focus_cmd(*, flags: dict[str, Any], logs: LogsOpt = None, as_json: JsonOpt = False) -> None:
    """Build the next focused round: hard A + verified bucket 0 (round 1), or the previous
    round's low scorers minus flagged prompts (round N+1)."""
    with bad_input_exits():
        cfg = FocusConfig(**flags, logs=workspace.logs_dir(logs))
    result = _run("focusing", lambda: focus.run_focus(cfg))
    summary("ddai curate focus", result.to_dict(), as_json=as_json)


@curate_app.command(
    "plan", short_help="Estimate mixed GRPO groups, rare successes and cost per bucket."
)
@with_groups({"flags": PLAN_FLAGS, "to": PLAN_OUT_FLAGS})
def plan_cmd(
    *,
    flags: dict[str, Any],
    logs: LogsOpt = None,
    success_threshold: ThresholdOpt = default_of(PlanConfig, "success_threshold"),
    to: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Estimate, per bucket and n_agent, the share of GRPO groups with mixed outcomes, the
    expected (rare) successes and the calls and cost; recommend the smallest n_agent reaching
    the target."""
    with bad_input_exits():
        cfg = PlanConfig(
            **{**flags, "price_per_call": plan.default_price(flags["price_per_call"])},
            logs=workspace.logs_dir(logs),
            success_threshold=success_threshold,
            **to,
        )
    result = _run("planning", lambda: plan.run_plan(cfg))
    data = plan.plan_to_json(result, cfg)
    if cfg.out is not None:
        from ddai.pipelines.store import io

        io.write_json(cfg.out, data)
    if as_json:
        summary("ddai curate plan", data, as_json=True)
        return
    shown = [
        {
            "bucket": r["bucket"],
            "n_agent": r["n_agent"],
            "prompts": r["prompts"],
            "mixed share": f"{r['mixed_share']:.3f}",
            "rare successes": f"{r['expected_rare_successes']:,.1f}",
            "calls": r["calls"],
            "cost $": "-" if r["cost_usd"] is None else f"{r['cost_usd']:,.2f}",
        }
        for r in result.rows
    ]
    print_rows("plan (all columns: --json or --out)", shown)
    summary("ddai curate plan", result.summary(cfg.target))


@with_groups({"flags": LINEAGE_FLAGS})
def lineage_cmd(*, flags: dict[str, Any], as_json: JsonOpt = False) -> None:
    """Walk the manifests of FILE back to the raw logs and print the funnel."""
    from ddai.pipelines.store import objstore

    cfg = configs.LineageConfig(**flags)
    files, check = cfg.files, cfg.check
    missing = [objstore.display(f) for f in files if not objstore.any_exists(f)]
    if missing:
        raise fail(f"{', '.join(missing)} not found; pass funnel outputs (with .manifest.json)")
    graph = _run("tracing", lambda: lineage.lineage_graph(files, check_hashes=check))
    _fail_untraceable(graph)
    bad = [n for n in graph["nodes"] if n.get("mismatch")]
    if as_json:
        summary("ddai lineage", graph, as_json=True)
        _fail_mismatch(bad)
        return
    rows = lineage.lineage_rows(graph)
    shown = [
        {
            "step": r["step"],
            "output": r["output"],
            "in": r["rows in"],
            "out": (
                f"{r['rows out']:,} rollouts"
                if r["unit"] == "rollouts" and r["rows out"] is not None
                else r["rows out"]
            ),
            "dropped": [f"{k} {v:,}" for k, v in r["dropped"].items()],
            "from": list(r["inputs"]),
            **({"check": r["mismatch"] or "ok"} if check else {}),
        }
        for r in rows
    ]
    print_rows("lineage", shown)
    changed = sum(bool(e["changed"]) for e in graph["edges"])
    summary(
        "ddai lineage",
        {
            "steps": sum(n["kind"] == "step" for n in graph["nodes"]),
            "log partitions": sum(n["kind"] == "log" for n in graph["nodes"]),
            "raw sources": sum(n["kind"] == "source" for n in graph["nodes"]),
            "missing": sum(n["kind"] == "missing" for n in graph["nodes"]),
            **({"inputs changed since use": changed} if check else {}),
            **({"outputs not matching their manifest": len(bad)} if check else {}),
        },
    )
    _fail_mismatch(bad)


def _fail_untraceable(graph: dict[str, Any]) -> None:
    """Exit 2 for a FILE with no manifest: its lineage would be the file alone, with exit 0."""
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    plain = [t for t in graph["targets"] if kinds.get(t) == "file"]
    if plain:
        raise fail(
            f"{', '.join(plain)}: no manifest (<file>.manifest.json) beside it, so there is nothing "
            "to trace: ddai did not write it, or the step writing it stopped before its manifest "
            "(rerun that step). Pass a ddai output (curate, distill, corpus build, pointer) or a "
            "log partition (<logs>/run_id=RUN)"
        )


def _fail_mismatch(bad: list[dict[str, Any]]) -> None:
    """Exit 1 naming the outputs (or partitions) whose bytes are not what their manifest holds."""
    if bad:
        raise fail(
            "; ".join(f"{n['path']}: {n['mismatch']}" for n in bad)
            + ". Rerun the step that wrote each (it will not be skipped) or re-ingest the run",
            code=1,
        )


def register(app: typer.Typer) -> None:
    """Add ``ddai curate …`` and ``ddai lineage`` to the main app."""
    app.add_typer(curate_app)
    app.command("lineage")(lineage_cmd)
