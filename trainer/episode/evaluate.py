"""``ddai eval``: a Searcher policy over a test set in DDAI's format, scored by the set's own
categories.

The rollouts are ``ddai collect``'s (``run_collect``: the same environment, episodes, reward
and log rows), logged as one run of the log store with each prompt's category values in the row's
``extra`` (``eval_categories``) so the report's evaluation section can break any eval run down
again. Greedy by default (``temperature`` 0), one rollout per prompt. A run id already in the
store is refused unless ``append`` (a second eval into one run would count its prompts twice).
The breakdown itself is ``ddai.pipelines.analyses.evaluation.breakdown`` (accuracy, judge, NDCG).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ddai.pipelines.analyses import evaluation
from ddai.pipelines.store import workspace
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.collect import run_collect
from ddai.trainer.episode.collect_config import EvalConfig


@dataclass
class EvalResult:
    run_id: str
    logs: str
    test_set: str
    generated_by: str
    prompts: int
    rollouts_logged: int
    categories: list[str]
    accuracy: float | None
    judge: float | None
    judge_missing: int
    ndcg: float | None
    crop_pad: int
    """Pixels each ``<bbox>`` was widened by on each side before its crop (DDAI's evaluation:
    28; 0: the box as written); also in the run's manifest."""
    by_category: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def run_eval(cfg: EvalConfig, backends: Any | None = None) -> EvalResult:
    """Roll the policy out over ``cfg.data``, log the run, score it by the set's categories."""
    from ddai.pipelines.store import store_read  # the store's readers: not for ``ddai eval --help``

    logs = workspace.logs_dir(cfg.logs)
    cfg.run_id = cfg.run_id or f"eval_{time.strftime('%Y%m%d_%H%M%S')}"
    if not cfg.append and cfg.run_id in store_read.list_runs(logs):
        raise TrainConfigError(
            f"--run-id {cfg.run_id}: the log store {logs} already holds this run; pick another "
            "run id, or pass --append to add these rollouts to it"
        )
    rows = evaluation.read_set(cfg.data, cfg.limit)
    fields, cats = evaluation.set_categories(rows, cfg.by)
    scored: list[dict[str, Any]] = []

    def annotate(row: dict[str, Any]) -> None:
        row["extra"][evaluation.CATEGORY_KEY] = cats.get(row["uid"], {})
        scored.append({**row, "categories": row["extra"][evaluation.CATEGORY_KEY]})

    res = run_collect(cfg, backends, annotate=annotate)
    table = evaluation.breakdown(scored, fields)
    overall = table["overall"]
    return EvalResult(
        run_id=res.run_id,
        logs=res.logs,
        test_set=str(cfg.data),
        generated_by=res.generated_by,
        prompts=res.prompts,
        rollouts_logged=res.rollouts_logged,
        categories=fields,
        accuracy=overall["accuracy"],
        judge=overall["judge"],
        judge_missing=overall["judge_missing"],
        ndcg=overall["ndcg"],
        crop_pad=cfg.episode.crop_pad,
        by_category=table["by_category"],
    )
