"""CLI: ``ddai report``: the HTML analysis report over the rollout logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RunsOpt,
    ThresholdOpt,
    bad_input_exits,
    check_run_ids,
    megabytes,
    summary,
)
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.store import workspace
from ddai.reports.config import ReportConfig

R = ReportConfig

REPORT_FLAGS = config_flags(
    R,
    {
        "datasets": {"metavar": "<file>"},
        "datasets_dir": None,
        "flags": {"metavar": "<csv>"},
        **dict.fromkeys(("judge_high", "ndcg_low", "judge_low", "ndcg_high", "max_turns")),
        **dict.fromkeys(("browse_max", "text_max", "top")),
        "value_sft": {"metavar": "<dir>"},
        "seed": None,
        "title": None,
        "threads": {"min": 1},
        "out": {"decl": ("--out", "-o"), "type": Path | None, "default": None},
    },
)
COMPARE_FLAGS = config_flags(
    R,
    {
        "compare": {
            "callback": check_run_ids,
            "metavar": "<run>",
            "type": list[str] | None,
            "default": None,
            "parse": lambda runs: tuple(runs) if runs else None,
        }
    },
)
"""``--compare`` beside ``--logs``/``--run``: its list becomes the config's pair."""


@with_groups({"settings": REPORT_FLAGS, "compare": COMPARE_FLAGS})
def report_cmd(
    *,
    settings: dict[str, Any],
    logs: LogsOpt = None,
    runs: RunsOpt = None,
    compare: dict[str, Any],
    threshold: ThresholdOpt = default_of(R, "success_threshold"),
    progress: ProgressOpt = default_of(R, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML report (opens offline): overview, funnel, per-prompt outcomes,
    judge vs NDCG, hallucination suspects, search behaviour, run comparison, trajectory browser,
    then failure attribution, reward latency and coverage, and the drop/keep lists."""
    with bad_input_exits():
        cfg = ReportConfig(
            **settings | {"out": settings["out"] or workspace.home() / "report.html"},
            **compare,
            logs=workspace.logs_dir(logs, demo_fallback=True),
            runs=runs or None,
            success_threshold=threshold,
            progress=progress and not as_json,
        )
        from ddai.reports.build import build_report  # plotly, DuckDB: loaded to run, not for --help

        result = build_report(cfg)
    result.pop("stats")
    result.pop("timings")
    if not as_json:  # people read the page's size in MB under a label that says so
        result = {("page size" if k == "bytes" else k): v for k, v in result.items()}
        result["page size"] = megabytes(result["page size"])
    summary("ddai report", result, as_json=as_json)


register = top_command("report", report_cmd)
