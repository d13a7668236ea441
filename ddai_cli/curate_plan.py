"""CLI: ``ddai curate plan``: mixed GRPO groups, rare successes and cost per bucket."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import (
    JsonOpt,
    LogsOpt,
    ThresholdOpt,
    bad_input_exits,
    print_rows,
    summary,
)
from ddai.cli.curate import OUT, RUN, run_step
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.funnel.plan_config import PlanConfig
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.store import workspace

plan = lazy_module("ddai.pipelines.funnel.plan")  # the step loads when the command runs


PLAN_FLAGS = config_flags(
    PlanConfig,
    {
        "runs": RUN,
        "n_agent": {"metavar": "<n>"},
        **dict.fromkeys(("max_turns", "target", "prior")),
        "buckets": {"decl": "--bucket", "metavar": "<file>"},
        "price_per_call": None,
    },
)
PLAN_OUT_FLAGS = config_flags(PlanConfig, {"out": OUT})


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
    result = run_step("planning", lambda: plan.run_plan(cfg))
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


register = subcommand("curate", "plan", plan_cmd)
