"""DDAI's published funnel inputs from ../shared/ddai-data: the round logs ingested into a store
and the first bucketing (2,791 / 1,560 / 637), shared by the funnel's real-data tests and the
review queue's browser test."""

from __future__ import annotations

from pathlib import Path

from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.step import StepResult
from ddai.pipelines.ingest import IngestConfig, ingest


def reconstructed(shared: Path) -> Path:
    """The reconstructed round logs and review sheets."""
    return shared / "ddai-data" / "reconstructed"


def ingest_rounds(shared: Path, logs: Path, runs: tuple[str, ...] = ("round0", "round1")) -> Path:
    """DDAI's flash round logs ingested into ``logs`` as runs named after them."""
    for run in runs:
        src = reconstructed(shared) / f"{run}_flash_rm_detail.jsonl"
        ingest(IngestConfig([src], logs, run_id=run, progress=False))
    return logs


def bucket(shared: Path, out: Path) -> StepResult:
    """``curate bucket`` of the 6,667 training prompts by their phase-1 NDCG scores."""
    data = shared / "ddai-data"
    return run_bucket(
        BucketConfig(
            dataset=data / "slidevqa_train_6667.parquet",
            out=out,
            scores=data / "phase1_ndcg_scores.parquet",
            score_col="phase1_ndcg",
        )
    )
