"""CLI: ``ddai curate`` (bucket, verify-gt, focus, plan) and ``ddai lineage FILE``.

Each command parses its flags into the step's config dataclass, runs the step and prints its
summary; a step whose inputs and parameters are unchanged is skipped (``--force`` reruns).

Longer than 400 lines because it declares the flags of the funnel's four steps and ``lineage``,
each with its help; the logic is ``ddai.pipelines.funnel``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RetryFailedOpt,
    ThresholdOpt,
    bad_input_exits,
    check_run_ids,
    choices,
    err_console,
    exit_if_calls_failed,
    fail,
    print_rows,
    summary,
)
from ddai.cli.flags import default_of  # options would load the episode configs (trainer.episode)
from ddai.pipelines.funnel import configs
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.store import workspace

# the steps load when a command runs; --help reads only their configs (pipelines/funnel/configs.py)
bucket = lazy_module("ddai.pipelines.funnel.bucket")
focus = lazy_module("ddai.pipelines.funnel.focus")
lineage = lazy_module("ddai.pipelines.funnel.lineage")
plan = lazy_module("ddai.pipelines.funnel.plan")
verify_gt = lazy_module("ddai.pipelines.funnel.verify_gt")

duckdb = lazy_module("duckdb")

T = TypeVar("T")

curate_app = typer.Typer(
    name="curate",
    help="The curation funnel: bucket prompts by score, verify ground truth, focus the next "
    "round, plan its rollout budget.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


Metric = choices("Metric", configs.METRICS)
Agg = choices("Agg", configs.AGGS)
Prior = choices("Prior", configs.PRIORS)
B, V, FC, PC = configs.BucketConfig, configs.VerifyConfig, configs.FocusConfig, configs.PlanConfig


DatasetOpt = Annotated[
    Path, typer.Option("--dataset", help="The prompt set (Parquet with an `id` column).")
]
RunOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--run",
        metavar="<run>",
        callback=check_run_ids,
        help="Run whose rollouts score the prompts; repeat to pool several runs. Each run must "
        "carry the score read (bucket: --metric; focus: reward; verify-gt: reward and NDCG).",
    ),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Rerun even when inputs and parameters are unchanged.")
]
DecisionsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--decisions",
        metavar="<csv>",
        help="A person's review CSV (uid, verdict, reason; verdict ok, wrong or uncertain). "
        "Repeatable; a later file's decision on a uid wins.",
    ),
]


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
def bucket_cmd(
    dataset: DatasetOpt,
    out: Annotated[
        Path,
        typer.Option(
            "--out-dir", metavar="<dir>", help="Folder for curriculum_bucket_{b,a,0}.parquet."
        ),
    ],
    logs: LogsOpt = None,
    runs: RunOpt = None,
    scores: Annotated[
        Path | None,
        typer.Option("--scores", help="Per-prompt score table (Parquet, CSV or JSONL with `id`)."),
    ] = None,
    score_col: Annotated[
        str | None,
        typer.Option(
            "--score-col",
            help="Score column of --scores; also the extra_info field the score is kept in "
            "(default: the table's one numeric column besides id; with --run: <metric>_<agg>).",
        ),
    ] = None,
    metric: Annotated[
        Metric,
        typer.Option(help="Rollout metric aggregated per prompt (format failures count 0)."),
    ] = Metric(default_of(B, "metric")),
    agg: Annotated[Agg, typer.Option(help="Aggregate over a prompt's rollouts.")] = Agg(
        default_of(B, "agg")
    ),
    mastered: Annotated[
        float, typer.Option(help="Bucket B (mastered): score above this.")
    ] = default_of(B, "mastered"),
    floor: Annotated[
        float,
        typer.Option(help="Bucket 0 (unsolvable for now): score below this; A in between."),
    ] = default_of(B, "floor"),
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Split a dataset into buckets B / A / 0 by a per-prompt score (DDAI's curriculum buckets)."""
    with bad_input_exits():
        cfg = bucket.BucketConfig(
            dataset=dataset,
            out=out,
            logs=_logs(logs, runs),
            runs=tuple(runs or ()),
            scores=scores,
            score_col=score_col,
            metric=metric.value,
            agg=agg.value,
            mastered=mastered,
            floor=floor,
            force=force,
        )
    result = _run("bucketing", lambda: bucket.run_bucket(cfg))
    summary("ddai curate bucket", result.to_dict(), as_json=as_json)


@curate_app.command("verify-gt", short_help="Propose ground-truth errors for review.")
def verify_gt_cmd(
    dataset: DatasetOpt,
    out: Annotated[
        Path,
        typer.Option(
            "--out-dir",
            metavar="<dir>",
            help="Folder for <dataset>_filtered.parquet, <dataset>_excluded.parquet, "
            "review.csv and review.html.",
        ),
    ],
    logs: LogsOpt = None,
    runs: RunOpt = None,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select",
            metavar="<rule>",
            help="Candidate rule (repeatable; default with --run: all three): "
            + "; ".join(f"{k}: {v}" for k, v in configs.RULE_HELP.items())
            + ". Without --run every prompt is a candidate.",
        ),
    ] = None,
    ndcg_min: Annotated[
        float, typer.Option(help="NDCG threshold of the candidate rules.")
    ] = default_of(V, "ndcg_min"),
    low_score_max: Annotated[
        float, typer.Option(help="Upper score bound of the low-score rule.")
    ] = default_of(V, "low_score_max"),
    verifier: Annotated[
        str | None,
        typer.Option(
            "--verifier",
            help="GT verifier backend (ddai.toml [backends.NAME]; default: $DDAI_VERIFIER, "
            "[roles] verifier, else local). Asked about undecided candidates unless only "
            "--decisions is given.",
        ),
    ] = None,
    corpus: Annotated[
        Path | None,
        typer.Option(
            "--corpus",
            help="Page corpus (pages.parquet) the verifier reads: page text, and page images "
            "from an image corpus (`ddai corpus build`).",
        ),
    ] = None,
    decisions: DecisionsOpt = None,
    trust_verifier: Annotated[
        bool,
        typer.Option(
            "--trust-verifier",
            help="Exclude on the verifier's proposals (wrong or uncertain) without a person.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Count the verifier calls and their estimated cost; call nothing."
        ),
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost", help="Stop calling before spending more than this many USD (resumable)."
        ),
    ] = None,
    skip_preflight: Annotated[
        bool,
        typer.Option(
            "--skip-preflight",
            help="Ask the verifier even about candidates whose reference pages the corpus lacks "
            "(by default that exits 2 before any call, naming the pages). Recorded in the "
            "summary and the output's manifest.",
        ),
    ] = False,
    force: ForceOpt = False,
    retry_failed: RetryFailedOpt = False,
    progress: ProgressOpt = default_of(V, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Propose ground-truth errors for review; exclude only what a person (or --trust-verifier)
    decided is wrong or uncertain."""
    with bad_input_exits():
        cfg = verify_gt.VerifyConfig(
            dataset=dataset,
            out=out,
            logs=_logs(logs, runs),
            runs=tuple(runs or ()),
            select=tuple(select or ()),
            ndcg_min=ndcg_min,
            low_score_max=low_score_max,
            verifier=verifier,
            corpus=corpus,
            decisions=tuple(decisions or ()),
            trust_verifier=trust_verifier,
            dry_run=dry_run,
            max_cost=max_cost,
            force=force,
            retry_failed=retry_failed,
            skip_preflight=skip_preflight,
            progress=progress and not as_json,
        )
    # No spinner here: the verifier backend shows its own progress bar.
    result = _run("verifying", lambda: verify_gt.run_verify(cfg), spinner=False)
    summary("ddai curate verify-gt", result.to_dict(), as_json=as_json)
    if note := result.summary.get("verifier note"):
        err_console.print(f"warning: {note}", markup=False, soft_wrap=True)
    exit_if_calls_failed(result.summary)


@curate_app.command("focus", short_help="Build the next focused round: hard A + verified bucket 0.")
def focus_cmd(
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="<file>", help="The next round's dataset (Parquet)."),
    ],
    logs: LogsOpt = None,
    runs: RunOpt = None,
    bucket_a: Annotated[
        Path | None,
        typer.Option("--bucket-a", help="Round 1: bucket A (curriculum_bucket_a.parquet)."),
    ] = None,
    bucket_0: Annotated[
        Path | None,
        typer.Option(
            "--bucket-0",
            help="Round 1: the verified bucket 0 (curriculum_bucket_0_filtered.parquet).",
        ),
    ] = None,
    hard_max: Annotated[
        float,
        typer.Option(help="Round 1: keep bucket-A prompts whose mean reward is at or under this."),
    ] = default_of(FC, "hard_max"),
    prev: Annotated[
        Path | None, typer.Option("--prev", help="Round N+1: the previous round's dataset.")
    ] = None,
    score_max: Annotated[
        float,
        typer.Option(
            help="Round N+1: keep prompts whose mean reward in the run is at or under this."
        ),
    ] = default_of(FC, "score_max"),
    decisions: DecisionsOpt = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the next focused round: hard A + verified bucket 0 (round 1), or the previous
    round's low scorers minus flagged prompts (round N+1)."""
    with bad_input_exits():
        cfg = focus.FocusConfig(
            out=out,
            logs=workspace.logs_dir(logs),
            runs=tuple(runs or ()),
            bucket_a=bucket_a,
            bucket_0=bucket_0,
            hard_max=hard_max,
            prev=prev,
            score_max=score_max,
            decisions=tuple(decisions or ()),
            force=force,
        )
    result = _run("focusing", lambda: focus.run_focus(cfg))
    summary("ddai curate focus", result.to_dict(), as_json=as_json)


@curate_app.command(
    "plan", short_help="Estimate mixed GRPO groups, rare successes and cost per bucket."
)
def plan_cmd(
    logs: LogsOpt = None,
    runs: RunOpt = None,
    n_agent: Annotated[
        list[int] | None,
        typer.Option(
            "--n-agent",
            metavar="<n>",
            help="Proposed rollouts per prompt; repeatable (default "
            + " ".join(map(str, configs.DEFAULT_N_AGENT))
            + ").",
        ),
    ] = None,
    max_turns: Annotated[
        int, typer.Option(help="Turn limit per rollout (bounds the policy's turn budget).")
    ] = default_of(PC, "max_turns"),
    target: Annotated[
        float,
        typer.Option(help="Wanted share of GRPO groups with mixed outcomes (learning signal)."),
    ] = default_of(PC, "target"),
    prior: Annotated[
        Prior,
        typer.Option(
            help="Shrinkage of per-prompt success rates: empirical (Beta fitted per bucket), "
            "jeffreys (Beta(1/2, 1/2)) or none (plug-in s/m)."
        ),
    ] = Prior(default_of(PC, "prior")),
    bucket_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--bucket",
            metavar="<file>",
            help="A dataset whose ids form one bucket (named by its file stem); repeatable. "
            "Default: buckets B / A / 0 by the run's mean NDCG.",
        ),
    ] = None,
    price_per_call: Annotated[
        float | None,
        typer.Option(
            "--price-per-call",
            help="USD per generator or judge call (default: $DDAI_PRICE_PER_CALL, ddai.toml "
            "[plan] price_per_call; none set: the cost is shown as unknown, not 0).",
        ),
    ] = None,
    success_threshold: ThresholdOpt = default_of(PC, "success_threshold"),
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="<file>", help="Also write the plan as JSON to this file."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Estimate, per bucket and n_agent, the share of GRPO groups with mixed outcomes, the
    expected (rare) successes and the calls and cost; recommend the smallest n_agent reaching
    the target."""
    with bad_input_exits():
        cfg = plan.PlanConfig(
            logs=workspace.logs_dir(logs),
            runs=tuple(runs or ()),
            n_agent=tuple(n_agent or configs.DEFAULT_N_AGENT),
            max_turns=max_turns,
            target=target,
            prior=prior.value,
            success_threshold=success_threshold,
            price_per_call=plan.default_price(price_per_call),
            buckets=tuple(bucket_files or ()),
        )
    result = _run("planning", lambda: plan.run_plan(cfg))
    data = plan.plan_to_json(result, cfg)
    if out is not None:
        from ddai.pipelines.store import io

        io.write_json(out, data)
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


def lineage_cmd(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE", help="Funnel output file(s) to trace.")
    ],
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Re-hash every input and mark the ones changed since they were used; re-hash "
            "every output and log partition against its manifest and exit 1 when one differs "
            "(an interrupted write or an edit).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Walk the manifests of FILE back to the raw logs and print the funnel."""
    from ddai.pipelines.store import objstore

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
