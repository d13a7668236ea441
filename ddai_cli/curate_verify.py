"""CLI: ``ddai curate verify-gt``: propose ground-truth errors for review."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    LogsOpt,
    ProgressOpt,
    RetryFailedOpt,
    bad_input_exits,
    err_console,
    exit_if_calls_failed,
    fail,
    summary,
)
from ddai.cli.curate import DECISIONS, OUT_DIR, RUN, logs_for_runs, run_step
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.funnel.verify_config import VerifyConfig
from ddai.pipelines.records.lazy import lazy_module

verify_gt = lazy_module("ddai.pipelines.funnel.verify_gt")  # the step loads when the command runs


VERIFY_FLAGS = config_flags(
    VerifyConfig,
    {
        "dataset": None,
        "out": OUT_DIR,
        "runs": RUN,
        "select": {"metavar": "<rule>"},
        **dict.fromkeys(("ndcg_min", "low_score_max", "verifier", "corpus")),
        "decisions": DECISIONS,
        **dict.fromkeys(("trust_verifier", "dry_run", "max_cost", "skip_preflight", "force")),
    },
)


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
            logs=logs_for_runs(logs, flags["runs"]),
            retry_failed=retry_failed,
            progress=progress and not as_json,
        )
    # No spinner here: the verifier backend shows its own progress bar.
    try:
        result = run_step("verifying", lambda: verify_gt.run_verify(cfg), spinner=False)
    except OSError as e:  # a full disk, say: the outputs are committed together, so none landed
        raise fail(
            f"{cfg.out}: {e}; no output was committed there (fix the cause and rerun: the "
            "verifier's answers are cached)",
            EXIT_FAILED,
        ) from e
    summary("ddai curate verify-gt", result.to_dict(), as_json=as_json)
    if note := result.summary.get("verifier note"):
        err_console.print(f"warning: {note}", markup=False, soft_wrap=True)
    exit_if_calls_failed(result.summary)


register = subcommand("curate", "verify-gt", verify_gt_cmd)
