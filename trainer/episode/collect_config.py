"""``ddai collect``'s and ``ddai eval``'s configs (``CollectConfig``, ``EvalConfig``): their
``--help`` reads them without the collection loop and the evaluation's breakdown
(``trainer/episode/collect.py`` and ``trainer/episode/evaluate.py`` re-export them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.config import (
    EpisodeConfig,
    EpisodeInputs,
    EpisodeSettings,
    PageSettings,
    PreflightSettings,
)


@dataclass
class CollectConfig(PreflightSettings, EpisodeSettings, PageSettings, EpisodeInputs):
    """One collection run; every field has a flag in ``ddai collect``, the nested
    ``episode``, ``rewards`` and ``backends`` (``EpisodeSettings``) field by field, the page
    settings (``PageSettings``), the inputs (``EpisodeInputs``) and the preflight
    (``PreflightSettings``)."""

    model: str
    """The policy (a local folder or hub id); with --generate-via, only its tokenizer and chat
    template (those of the server's model)."""
    generate_via: str | None = None
    """Generate the policy's turns through this OpenAI-compatible server: a [backends.NAME] table
    of kind openai in ddai.toml (base_url, model). Default: the local --model."""
    run_id: str | None = None
    """Run id of the rollout log. Default: collect_<timestamp>."""
    n_agent: int = 1
    """Rollouts per prompt."""
    batch_size: int = 8
    """Rollouts per batch and process (a multiple of --n-agent)."""
    temperature: float = 1.0
    """Sampling temperature (0: greedy)."""
    top_p: float = 1.0
    """Nucleus sampling p."""
    top_k: int = 0
    """Top-k sampling (0: off)."""
    dtype: str = "float32"
    """Local policy dtype: float32 (CPU), bfloat16, ..."""
    seed: int = 0
    """Sampling seed (plus the rank)."""
    progress: bool = True

    def check(self) -> None:
        self.check_pages()
        self.check_episode()
        if self.observation == "image" and self.generate_via is not None:
            raise TrainConfigError(
                "--observation image with --generate-via: the server is sent token ids, not page "
                "images; roll out the VLM locally (--model, without --generate-via)"
            )
        if self.n_agent < 1 or self.batch_size < 1 or self.batch_size % self.n_agent:
            raise TrainConfigError(
                f"--batch-size {self.batch_size} must be a positive multiple of --n-agent "
                f"{self.n_agent} (rollouts per batch = prompts × n_agent)"
            )


EVAL_CROP_PAD = 28
"""Pixels DDAI's evaluation adds to each side of a ``<bbox>`` (vrag_agent/generation.py,
``_process_bbox_single``, its ``is_validation`` branch); its training adds none."""


@dataclass
class EvalConfig(CollectConfig):
    """One evaluation run: ``CollectConfig``'s fields (its flags) with evaluation defaults."""

    episode: EpisodeConfig = field(
        default_factory=lambda: EpisodeConfig(crop_pad=EVAL_CROP_PAD), kw_only=True
    )
    """Turns, search and token budgets of each episode; crops widened as DDAI's evaluation's."""

    data: Path
    """The test set in verl's RL parquet shape, e.g. DDAI's overall_test_crop.parquet (its
    data_source and *_type fields are the categories)."""
    run_id: str | None = None
    """Run id of the rollout log. Default: eval_<timestamp>."""

    temperature: float = 0.0
    """Sampling temperature (0: greedy, the evaluation default)."""
    by: list[str] | None = None
    """Category fields to break the scores down by (default: every one the set carries: `data_source` and each `*_type` field, top-level or in `extra_info`)."""
    append: bool = False
    """Add the rollouts to an existing --run-id (else an existing run id is refused)."""
