"""The curation funnel (DESIGN.md, "The funnel"; seed 000, 9.1.1): where the next round's compute
goes, every output traceable back to the raw logs.

Modules, one step each: ``bucket`` (B / A / 0 by a per-prompt score), ``verify_gt`` (GT review
sheet; only a person's decisions exclude), ``focus`` (round 1 and round N+1), ``plan`` (n_agent
from per-prompt success probabilities), ``lineage`` (manifests back to the raw logs). Shared:
``dataset`` (datasets in their own shape), ``scores`` (per-prompt scores from logs or a table),
``decisions`` (review CSVs), ``review`` (the sheet), ``step`` (manifests and skipping).
"""

from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.demo import run_funnel_demo
from ddai.pipelines.funnel.focus import FocusConfig, run_focus
from ddai.pipelines.funnel.lineage import lineage_graph, lineage_rows
from ddai.pipelines.funnel.plan import PlanConfig, run_plan
from ddai.pipelines.funnel.verify_gt import VerifyConfig, run_verify

__all__ = [
    "BucketConfig",
    "FocusConfig",
    "PlanConfig",
    "VerifyConfig",
    "lineage_graph",
    "lineage_rows",
    "run_bucket",
    "run_focus",
    "run_funnel_demo",
    "run_plan",
    "run_verify",
]
