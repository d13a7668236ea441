"""DDAI's round analyses over the rollout logs (seed 000, 9.8): why low-scoring prompts fail,
reward latency and coverage, and zero-variance GRPO groups with the prompts to drop or keep.

Each analysis is a view in ``sql/`` (``failure_attribution``, ``reward_latency``,
``zero_variance_groups`` / ``drop_keep``); these modules check that the runs carry what the view
needs, bind its parameters and summarize its rows for the CLI and the report.
"""

from ddai.pipelines.analyses.attribution import AttributionConfig, attribute
from ddai.pipelines.analyses.carries import MissingData
from ddai.pipelines.analyses.dropkeep import drop_keep
from ddai.pipelines.analyses.latency import reward_latency

__all__ = ["AttributionConfig", "MissingData", "attribute", "drop_keep", "reward_latency"]
