"""CLI: ``ddai curate focus``: build the next focused round."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, LogsOpt, bad_input_exits, summary
from ddai.cli.curate import DECISIONS, OUT, RUN, run_step
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.funnel.focus_config import FocusConfig
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.store import workspace

focus = lazy_module("ddai.pipelines.funnel.focus")  # the step loads when the command runs


FOCUS_FLAGS = config_flags(
    FocusConfig,
    {
        "out": OUT,
        "runs": RUN,
        **dict.fromkeys(("bucket_a", "bucket_0", "hard_max", "prev", "score_max")),
        "decisions": DECISIONS,
        "force": None,
    },
)


@with_groups({"flags": FOCUS_FLAGS})
def focus_cmd(*, flags: dict[str, Any], logs: LogsOpt = None, as_json: JsonOpt = False) -> None:
    """Build the next focused round: hard A + verified bucket 0 (round 1), or the previous
    round's low scorers minus flagged prompts (round N+1)."""
    with bad_input_exits():
        cfg = FocusConfig(**flags, logs=workspace.logs_dir(logs))
    result = run_step("focusing", lambda: focus.run_focus(cfg))
    summary("ddai curate focus", result.to_dict(), as_json=as_json)


register = subcommand("curate", "focus", focus_cmd)
