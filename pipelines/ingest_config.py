"""``IngestConfig``: what ``ddai ingest`` reads and where it commits (``ddai.pipelines.ingest``).

Apart from the ingest (which loads the store writer, the adapters' readers and rich's progress),
so that ``ddai ingest --help`` reads the flags' help from its fields without loading any of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class IngestConfig:
    sources: list[Path]
    """Rollout files: ddai's JSONL/Parquet, DDAI's unified_trajectory.jsonl, flash_rm_detail.jsonl
    or gspo_phase1.json, or verl rollout dumps ({step}.jsonl)."""
    logs: Path
    run_id: str | None = None
    """Run id for every row (wins over the rows' own run_id, which is kept as
    extra.source_run_id)."""
    append: bool = False
    """Add to the run's partition instead of replacing it."""
    fmt: str = "auto"
    """Input format, per file by content when auto. One of: auto, ddai, ddai-unified, ddai-flash,
    ddai-phase1, verl."""
    progress: bool = True
    uid_field: str | None = None
    """verl dumps: the field of each dump line that holds the dataset id (e.g. a reward extra
    'index'; dotted paths reach nested objects), so the run joins the dataset in curate/distill.
    Rows without it fall back to --dataset, else keep the sha1 uid, flagged uid_unmatched."""
    dataset: Path | None = None
    """verl dumps: the dataset (verl RL parquet: id, prompt) whose prompts give the ids: a dump
    row's last user message must equal one dataset row's after whitespace normalization;
    unmatched or ambiguous rows keep the sha1 uid, flagged uid_unmatched and counted, never
    guessed."""
    # Formats that can read in columns do, batch by batch (False: every row through the per-row
    # path; the same rollouts and quarantine, slower).
    columnar: bool = True
    # the store the runs are committed to, when not ``logs`` (a staged object-storage ingest: the
    # remote store): --append's duplicate check reads its keys, and whether a run is there
    stored_keys_from: Path | str | None = None

    def __post_init__(self) -> None:
        from ddai.pipelines import adapters
        from ddai.pipelines.store.store_read import refuse_file_store

        try:
            refuse_file_store(self.logs)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None

        if self.fmt not in adapters.formats():
            raise ValueError(
                f"--input-format {self.fmt!r} is not known; use one of "
                f"{', '.join(adapters.formats())}"
            )
