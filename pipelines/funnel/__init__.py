"""The curation funnel (DESIGN.md, "The funnel"; seed 000, 9.1.1): where the next round's compute
goes, every output traceable back to the raw logs.

Modules, one step each: ``bucket`` (B / A / 0 by a per-prompt score), ``verify_gt`` (GT review
sheet; only a person's decisions exclude), ``focus`` (round 1 and round N+1), ``plan`` (n_agent
from per-prompt success probabilities), ``lineage`` (manifests back to the raw logs). Shared:
``dataset`` (datasets in their own shape), ``scores`` (per-prompt scores from logs or a table),
``decisions`` (review CSVs), ``review`` (the sheet), ``step`` (manifests and skipping).
"""

from ddai.pipelines.records.lazy import lazy_names

# Where each public name lives: loaded on first use (PEP 562), so importing one step (or the
# configs, for `ddai curate --help`) does not import every step and its backends.
_HOMES = {
    "BucketConfig": "bucket",
    "run_bucket": "bucket",
    "run_funnel_demo": "demo",
    "FocusConfig": "focus",
    "run_focus": "focus",
    "lineage_graph": "lineage",
    "lineage_rows": "lineage",
    "PlanConfig": "plan",
    "run_plan": "plan",
    "VerifyConfig": "verify_gt",
    "run_verify": "verify_gt",
}

__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES)
