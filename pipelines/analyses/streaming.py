"""What DDAI's trainer itself logged about streaming reward, per step, from the unified log's side
tables (``_side/train.step.start`` and ``_side/train.step.metrics``, kept at ingest).

``train.step.start`` gives the batch (its ``ids``, else ``train_batch_size`` prompts, × ``n_agent``):
the rollouts the step generated, so rollouts in the store / expected is the coverage the logs can prove.
``train.step.metrics`` gives the trainer's own ``reward/streaming_sample_coverage``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

COVERAGE_KEY = "reward/streaming_sample_coverage"


def _events(logs: Path, table: str, run: str) -> list[dict[str, Any]]:
    # one file locally, the listed parts on object storage: read as one table (imported here:
    # the store's write side pulls pyarrow in)
    from ddai.pipelines.store.side_log import read_bytes

    data = read_bytes(logs, table, run).decode("utf-8")
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def step_log(logs: str | os.PathLike[str], run: str) -> dict[int, dict[str, Any]]:
    """step → ``expected_rollouts`` and ``logged_coverage`` where the side tables hold them."""
    out: dict[int, dict[str, Any]] = {}
    for ev in _events(Path(logs), "train.step.start", run):
        step, n, ids = ev.get("global_step"), ev.get("n_agent"), ev.get("ids")
        # the last batch of an epoch can be short: its ids say how many prompts it held
        size = len(ids) if isinstance(ids, list) else ev.get("train_batch_size")
        if isinstance(step, int) and isinstance(size, int) and isinstance(n, int):
            out.setdefault(step, {})["expected_rollouts"] = size * n
    for ev in _events(Path(logs), "train.step.metrics", run):
        step, metrics = ev.get("global_step"), ev.get("metrics")
        if isinstance(step, int) and isinstance(metrics, dict) and COVERAGE_KEY in metrics:
            out.setdefault(step, {})["logged_coverage"] = metrics[COVERAGE_KEY]
    return out
