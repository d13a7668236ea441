"""CLI: ``ddai analyze attribution|latency|drop-keep``: DDAI's round analyses over the logs.

Each command checks that its runs carry what it needs (exit 2 naming the run, what is missing and
what would supply it), prints a summary (``--json`` for JSON) and with ``--out`` writes the prompt
rows (CSV, Parquet or JSONL by the file's suffix).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from ddai.cli.app import group_app, group_command
from ddai.cli.common import JsonOpt, LogsOpt, RunsOpt, ThresholdOpt, bad_input_exits, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.analyses.configs import AttributionConfig, RowsOut
from ddai.pipelines.records.success import SUCCESS_THRESHOLD
from ddai.pipelines.store import workspace

analyze_app = group_app("analyze", name="analyze")

ATTRIBUTION_FLAGS = config_flags(
    AttributionConfig,
    {"score_max": None, "agree_min": None, "flags": {"metavar": "<csv>"}, "truth": None},
)
GROUPS_OUT_FLAGS = config_flags(RowsOut, {"groups_out": None})
OUT_FLAGS = config_flags(RowsOut, {"out": ("--out", "-o")})


def _runs(runs: list[str] | None) -> list[str] | None:
    return list(runs) if runs else None


def _flatten(result: dict[str, Any]) -> dict[str, Any]:
    """The summary for the rich table: one row per key, per-run dicts on their own rows."""
    flat: dict[str, Any] = {}
    for k, v in result.items():
        if k == "runs":
            flat.update({f"run {run}": r for run, r in v.items()})
        else:
            flat[k] = v
    return flat


def _commit(
    name: str,
    logs: Any,
    params: dict[str, Any],
    frames: dict[str, Any],
    files: RowsOut,
    result: dict[str, Any],
    extra_inputs: Sequence[Path] = (),
) -> None:
    """Write the requested ``frames`` (label → rows; a label is a ``RowsOut`` field with its
    underscore as a space) with their manifests, step ``analyze.<name>``: the runs the rows come
    from (``result["runs"]``) are the inputs and a parameter; their paths go into ``result``."""
    from ddai.pipelines.analyses import export
    from ddai.pipelines.store import manifest, objstore

    wanted = {k: v for k, v in frames.items() if getattr(files, k.replace(" ", "_")) is not None}
    if not wanted:
        return
    runs = list(result["runs"])
    inputs, rollouts = export.run_inputs(workspace.logs_dir(logs), runs)
    inputs += [manifest.input_record(p) for p in extra_inputs]
    outputs = {k: (getattr(files, k.replace(" ", "_")), df) for k, df in wanted.items()}
    step, params = f"analyze.{name}", {**params, "runs": runs}
    paths = export.commit_rows(step, params, inputs, rollouts, outputs, result)
    result.update({k: objstore.display(p) for k, p in paths.items()})


@group_command(analyze_app, "analyze", "attribution")
@with_groups({"settings": ATTRIBUTION_FLAGS, "rows": OUT_FLAGS})
def attribution_cmd(
    *,
    settings: dict[str, Any],
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    threshold: ThresholdOpt = SUCCESS_THRESHOLD,
    rows: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Attribute each low-scoring prompt to a search failure (no golden page retrieved), a
    generator bottleneck (golden page retrieved, answer judged wrong) or a likely wrong ground
    truth (review flag, or golden retrieved and rollouts agree on an answer the judge rejects)."""
    from ddai.pipelines.analyses import attribute, truth_eval
    from ddai.pipelines.store import objstore

    with bad_input_exits():
        cfg = AttributionConfig(**settings, threshold=threshold)
        df, result = attribute(workspace.logs_dir(logs), _runs(runs), cfg)
        if (truth := cfg.truth) is not None:
            if not truth.is_file():
                raise FileNotFoundError(f"--truth {truth} not found")
            result["truth"] = truth_eval.score(df, json.loads(truth.read_text(encoding="utf-8")))
        flags = [p if objstore.is_url(p) else p.resolve() for p in cfg.flags]
        params = {
            "score_max": cfg.score_max,
            "agree_min": cfg.agree_min,
            "threshold": cfg.threshold,
            "flags": [objstore.display(p) for p in flags],
        }
        _commit("attribution", logs, params, {"out": df}, RowsOut(**rows), result, flags)
    if as_json:
        summary("ddai analyze attribution", result, as_json=True)
        return
    show: dict[str, Any] = {}
    for run, r in result.pop("runs").items():
        c = r["counts"]
        show[f"run {run}"] = (
            f"{r['low']:,} low of {r['prompts']:,} prompts: {c['wrong_gt']:,} wrong ground truth, "
            f"{c['generator_bottleneck']:,} generator bottleneck, {c['search_failure']:,} search "
            "failure"
        )
    for cls, v in result.pop("truth", {}).get("classes", {}).items():
        show[f"truth {cls}"] = (
            f"precision {_ratio(v['precision'])} ({v['tp']}/{v['attributed']}), "
            f"recall {_ratio(v['recall'])} ({v['tp']}/{v['planted']})"
        )
    summary("ddai analyze attribution", {**show, **result})


def _ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


@group_command(analyze_app, "analyze", "latency")
@with_groups({"rows": OUT_FLAGS})
def latency_cmd(
    *,
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    rows: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Reward latency (extra.latency_s percentiles), judge timeouts and errors, and reward
    coverage (rollouts with a reward / rollouts) per run; --out writes the per-step rows."""
    from ddai.pipelines.analyses import reward_latency

    with bad_input_exits():
        steps, result = reward_latency(workspace.logs_dir(logs), _runs(runs))
        _commit("latency", logs, {}, {"out": steps}, RowsOut(**rows), result)
    summary("ddai analyze latency", result if as_json else _flatten(result), as_json=as_json)


@group_command(analyze_app, "analyze", "drop-keep")
@with_groups({"to": GROUPS_OUT_FLAGS, "rows": OUT_FLAGS})
def drop_keep_cmd(
    *,
    to: dict[str, Any],
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    rows: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Zero-variance GRPO groups (every rollout scored the same: no learning signal) and per
    prompt the decision: keep (some reward variance) or drop (always zero, always full, constant);
    --out writes the decisions."""
    from ddai.pipelines.analyses import drop_keep

    with bad_input_exits():
        decisions, groups, result = drop_keep(workspace.logs_dir(logs), _runs(runs))
        frames = {"out": decisions, "groups out": groups}
        _commit("drop-keep", logs, {}, frames, RowsOut(**to, **rows), result)
    summary("ddai analyze drop-keep", result if as_json else _flatten(result), as_json=as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(analyze_app)
