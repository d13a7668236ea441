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
"""

from ddai.pipelines.distill.check import CheckConfig, convert, run_check
from ddai.pipelines.distill.formats import FORMATS
from ddai.pipelines.distill.rules import DEFAULT_CLAIM_PATTERNS, ClaimRules
from ddai.pipelines.distill.run import DistillConfig, DistillError, run_distill
from ddai.pipelines.distill.safety import Candidate, Drops, Event, Sample, post_pass

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
