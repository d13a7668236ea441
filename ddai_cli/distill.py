"""CLI: ``ddai distill`` (rare-success SFT from a run), ``ddai distill check`` (the safety
post-pass over an existing SFT file) and ``ddai distill convert`` (train1 ⇄ messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ddai.cli.app import group_app, group_command
from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RetryFailedOpt,
    ThresholdOpt,
    bad_input_exits,
    check_run_ids,
    exit_if_calls_failed,
    fail,
    summary,
)
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.distill.configs import CheckConfig, ConvertConfig, DistillConfig, DistillError
from ddai.pipelines.records.rerun import ForceFlag
from ddai.pipelines.store import workspace

D, C = DistillConfig, CheckConfig

DROPS = {
    **dict.fromkeys(("drop_forced", "drop_system_errors", "drop_repeated_queries")),
    "claim_patterns": {"decl": "--claim-pattern", "metavar": "<regex>"},
}
DROP_FLAGS = config_flags(D, DROPS)
"""The post-pass's drops and claim rules, flags of both ``distill`` and ``distill check``."""
DISTILL_FLAGS = config_flags(
    D,
    {
        **dict.fromkeys(("success_rate_max", "top_k", "rank", "rewrite", "rewriter")),
        "fmt": "--format",
        "system_prompt": None,
        "max_system_errors": {"metavar": "<int>"},
        "val_ratio": None,
        "seed": None,
        "val_out": {"metavar": "<file>"},
        **dict.fromkeys(("max_thinks_per_call", "dry_run", "max_cost")),
    },
)
RERUN_FLAGS = config_flags(ForceFlag, {"force": None})
"""``--force``, as every funnel step (``distill`` is the funnel's fourth) and ``vet`` spell it."""
CHECK_FLAGS = config_flags(
    C, {"file": {"argument": True, "metavar": "FILE"}, "original": None, "report": None}
)
OUT = {"decl": ("--out", "-o"), "metavar": "<file>"}
CHECK_OUT_FLAGS = config_flags(C, {"out": OUT})
CONVERT_FLAGS = config_flags(
    ConvertConfig, {"file": {"argument": True, "metavar": "FILE"}, "to": None, "out": OUT}
)
TARGET_FLAGS = config_flags(
    D,
    {
        "runs": {
            "decl": "--run",
            "metavar": "<run>",
            "callback": check_run_ids,
            "type": list[str] | None,
            "default": None,
        },
        "out": {**OUT, "type": Path | None, "default": None},
    },
)
"""``--run``, ``--out``: optional flags, as the group's callback runs for the subcommands too;
``ddai distill`` itself requires them."""

distill_app = group_app("distill", name="distill", no_args_is_help=False)


def _claims(flag: list[str] | None) -> list[str] | None:
    return flag or workspace.setting("distill", "claim_patterns")


def _run(fn, *args: Any, out: Path | None = None, unwritten: str = "") -> dict[str, Any]:
    """``fn(*args)``, its errors said in one line; an ``OSError`` (a full disk, say) names
    ``out`` and what was left uncommitted (``unwritten``)."""
    try:
        return fn(*args)
    except (ValueError, FileNotFoundError) as e:
        raise fail(str(e)) from e
    except DistillError as e:
        raise fail(str(e), EXIT_FAILED) from e
    except OSError as e:
        raise fail(str(e) if out is None else f"{out}: {e}; {unwritten}", EXIT_FAILED) from e


@distill_app.callback(invoke_without_command=True)
@with_groups(
    {"settings": DISTILL_FLAGS, "drops": DROP_FLAGS, "rerun": RERUN_FLAGS, "target": TARGET_FLAGS}
)
def distill_cmd(
    ctx: typer.Context,
    *,
    settings: dict[str, Any],
    drops: dict[str, Any],
    rerun: dict[str, Any],
    logs: LogsOpt = None,
    target: dict[str, Any],
    success_threshold: ThresholdOpt = default_of(D, "success_threshold"),
    retry_failed: RetryFailedOpt = default_of(D, "retry_failed"),
    progress: ProgressOpt = default_of(D, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Distill rare successes of a run into SFT data (see `ddai distill check` for files)."""
    if ctx.invoked_subcommand is not None:
        return
    if not target["runs"]:
        raise fail("--run is required: name the run to distill (`ddai runs` lists them)")
    if target["out"] is None:
        raise fail("--out is required: the SFT Parquet file to write, e.g. --out sft.parquet")
    with bad_input_exits():
        cfg = DistillConfig(
            **settings,
            **rerun,
            **drops | {"claim_patterns": _claims(drops["claim_patterns"])},
            **target,
            logs=workspace.logs_dir(logs),
            success_threshold=success_threshold,
            progress=progress and not as_json,
            retry_failed=retry_failed,
        )
    from ddai.pipelines.distill.run import run_distill

    # the SFT file, its report (and validation file) and manifests are committed together
    unwritten = (
        "none of it, its report and its validation file was committed"
        if cfg.val_ratio > 0
        else "neither it nor its report was committed"
    )
    cached = ": the rewriter's cached calls are not paid again" if cfg.rewrite != "none" else ""
    data = _run(
        run_distill, cfg, out=cfg.out, unwritten=f"{unwritten} (fix the cause and rerun{cached})"
    )
    summary("ddai distill", data, as_json=as_json)
    exit_if_calls_failed(data)


@group_command(distill_app, "distill", "check")
@with_groups({"settings": CHECK_FLAGS, "drops": DROP_FLAGS, "to": CHECK_OUT_FLAGS})
def check_cmd(
    *,
    settings: dict[str, Any],
    drops: dict[str, Any],
    to: dict[str, Any],
    progress: ProgressOpt = default_of(C, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Run the safety post-pass over an existing SFT file and report what it finds."""
    with bad_input_exits():
        cfg = CheckConfig(
            **settings,
            **drops | {"claim_patterns": _claims(drops["claim_patterns"])},
            **to,
            progress=progress and not as_json,
        )
    from ddai.pipelines.distill.check import run_check

    # the report is written first, then --out: a failure may leave the report alone
    out, unwritten = (
        (cfg.report_file, "it was not written")
        if cfg.out is None
        else (cfg.out, "it was not committed (its report may have been)")
    )
    data = _run(run_check, cfg, out=out, unwritten=f"{unwritten}; fix the cause and rerun")
    summary("ddai distill check", data, as_json=as_json)


@group_command(distill_app, "distill", "convert")
@with_groups({"settings": CONVERT_FLAGS})
def convert_cmd(
    *,
    settings: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Convert an SFT file between the train1 and messages shapes, byte for byte."""
    from ddai.pipelines.distill.check import convert

    cfg = ConvertConfig(**settings)
    data = _run(
        convert,
        cfg.file,
        cfg.out,
        cfg.to,
        out=cfg.out,
        unwritten="it was not written; fix the cause and rerun",
    )
    summary("ddai distill convert", data, as_json=as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(distill_app, name="distill")
