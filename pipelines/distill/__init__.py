"""Rare-success SFT distillation (seed 000, 7.1-7.2; DESIGN.md, "The funnel", step 4).

```python
from ddai.pipelines.distill import DistillConfig, run_distill

summary = run_distill(DistillConfig(logs=Path("ddai-work/logs"), runs=["focused2"],
                                    out=Path("sft.parquet")))
```

Modules, one idea each: ``select`` (which rollouts), ``rebuild`` (rollout → train1 messages and
uids), ``thinks`` (think bodies in message text), ``rules`` (the rewrite's safety rules),
``findings`` (what a trajectory holds: forced completions, system errors, repeated queries, grammar
faults), ``rewrite`` (think-only rewrite through a backend), ``safety`` (the post-pass),
``formats`` (train1 and messages Parquet), ``stream`` (the selected rollouts to samples, batch by
batch, in bounded memory), ``run`` (the distill step), ``check`` (the post-pass
over an existing file, shape conversion).

Each name below is loaded from its module at first use (PEP 562): ``ddai distill --help`` reads the
configs alone and loads neither the step nor its backends, rich progress or store writers.
"""

from typing import TYPE_CHECKING

from ddai.pipelines.records.lazy import lazy_names

_HOME = {
    "CheckConfig": "check",
    "convert": "check",
    "run_check": "check",
    "FORMATS": "formats",
    "DEFAULT_CLAIM_PATTERNS": "rules",
    "ClaimRules": "rules",
    "DistillConfig": "run",
    "DistillError": "run",
    "run_distill": "run",
    "Candidate": "safety",
    "Drops": "safety",
    "Event": "safety",
    "Sample": "safety",
    "post_pass": "safety",
}
__all__ = [
    "DEFAULT_CLAIM_PATTERNS",
    "FORMATS",
    "Candidate",
    "CheckConfig",
    "ClaimRules",
    "DistillConfig",
    "DistillError",
    "Drops",
    "Event",
    "Sample",
    "convert",
    "post_pass",
    "run_check",
    "run_distill",
]

if TYPE_CHECKING:  # what the names are, for readers and type checkers; loaded lazily below
    from ddai.pipelines.distill.check import CheckConfig, convert, run_check
    from ddai.pipelines.distill.formats import FORMATS
    from ddai.pipelines.distill.rules import DEFAULT_CLAIM_PATTERNS, ClaimRules
    from ddai.pipelines.distill.run import DistillConfig, DistillError, run_distill
    from ddai.pipelines.distill.safety import Candidate, Drops, Event, Sample, post_pass


__getattr__, __dir__ = lazy_names(__name__, _HOME)
