"""CLI: ``ddai value score``: flags from ``ValueScoreConfig`` (``ddai.trainer.value.config``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, ProgressOpt, check_run_ids
from ddai.cli.common import summary as print_summary
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.value import ROWS, rows_read
from ddai.trainer.value.config import ValueScoreConfig

SCORE_FLAGS = config_flags(
    ValueScoreConfig,
    {"checkpoint": None, "out_run": {"callback": check_run_ids}, "batch_size": None, **ROWS},
)


@with_groups({"cfg": SCORE_FLAGS, "rows": rows_read})
def value_score_command(
    *,
    cfg: dict[str, Any],
    rows: dict[str, Any],
    progress: ProgressOpt = default_of(ValueScoreConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Write per-turn value estimates into the rollout log (turns[].value)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.cli.running import run_or_fail  # the run's modules: not for --help
    from ddai.trainer.value.score import score_runs

    config = ValueScoreConfig(**cfg, **rows, progress=progress and not as_json)
    print_summary("ddai value score", asdict(run_or_fail(score_runs, config)), as_json=as_json)


register = subcommand("value", "score", value_score_command)
