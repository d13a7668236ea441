"""CLI: what the value-head commands share (``ddai_cli/value_*.py``, one module per command:
``ddai train value``, ``ddai train value-sft``, ``ddai value score``): the flags of the rollouts
every value command reads (``ValueRowsConfig``). The two trainings' shared flags are
``ddai_cli/value_fit.py``'s."""

from __future__ import annotations

from typing import Any

from ddai.cli.common import LogsOpt, RunsOpt, ThresholdOpt
from ddai.cli.flags import default_of
from ddai.trainer.value.config import ValueRowsConfig

ROWS = dict.fromkeys(("data", "system_prompt", "max_length", "obs_max_tokens", "dtype"))
"""The flags of the fields every value command reads rollouts with (``ValueRowsConfig``)."""


def rows_read(
    *,
    logs: LogsOpt = default_of(ValueRowsConfig, "logs"),
    runs: RunsOpt = default_of(ValueRowsConfig, "runs"),
    success_threshold: ThresholdOpt = default_of(ValueRowsConfig, "success_threshold"),
) -> dict[str, Any]:
    """``--logs``, ``--run``, ``--success-threshold``: which rollouts every value command reads
    (``ValueRowsConfig``), as a group (``with_groups``)."""
    return {"logs": logs, "runs": runs, "success_threshold": success_threshold}
