"""DDAI's round analyses over the rollout logs (seed 000, 9.8): why low-scoring prompts fail,
reward latency and coverage, and zero-variance GRPO groups with the prompts to drop or keep.

Each analysis is a view in ``sql/`` (``failure_attribution``, ``reward_latency``,
``zero_variance_groups`` / ``drop_keep``); these modules check that the runs carry what the view
needs, bind its parameters and summarize its rows for the CLI and the report.

Each name below is loaded from its module at first use (PEP 562): ``ddai eval``, which reads
``evaluation`` alone, loads none of the analyses.
"""

from typing import TYPE_CHECKING

from ddai.pipelines.records.lazy import lazy_names

__all__ = ["AttributionConfig", "MissingData", "attribute", "drop_keep", "reward_latency"]
_HOME = {
    "AttributionConfig": "configs",
    "attribute": "attribution",
    "MissingData": "carries",
    "drop_keep": "dropkeep",
    "reward_latency": "latency",
}

if TYPE_CHECKING:  # what the names are, for readers and type checkers; loaded lazily below
    from ddai.pipelines.analyses.attribution import attribute
    from ddai.pipelines.analyses.carries import MissingData
    from ddai.pipelines.analyses.configs import AttributionConfig
    from ddai.pipelines.analyses.dropkeep import drop_keep
    from ddai.pipelines.analyses.latency import reward_latency


__getattr__, __dir__ = lazy_names(__name__, _HOME)
