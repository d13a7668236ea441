"""CLI: ``ddai curate bucket``: split a dataset into buckets B / A / 0 by a per-prompt score."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, LogsOpt, bad_input_exits, summary
from ddai.cli.curate import OUT_DIR, RUN, logs_for_runs, run_step
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.funnel.bucket_config import BucketConfig
from ddai.pipelines.records.lazy import lazy_module

bucket = lazy_module("ddai.pipelines.funnel.bucket")  # the step loads when the command runs


BUCKET_FLAGS = config_flags(
    BucketConfig,
    {
        "dataset": None,
        "out": OUT_DIR,
        "runs": RUN,
        **dict.fromkeys(("scores", "score_col", "metric", "agg", "mastered", "floor", "force")),
    },
)


@with_groups({"flags": BUCKET_FLAGS})
def bucket_cmd(*, flags: dict[str, Any], logs: LogsOpt = None, as_json: JsonOpt = False) -> None:
    """Split a dataset into buckets B / A / 0 by a per-prompt score (DDAI's curriculum buckets)."""
    with bad_input_exits():
        cfg = BucketConfig(**flags, logs=logs_for_runs(logs, flags["runs"]))
    result = run_step("bucketing", lambda: bucket.run_bucket(cfg))
    summary("ddai curate bucket", result.to_dict(), as_json=as_json)


register = subcommand("curate", "bucket", bucket_cmd)
