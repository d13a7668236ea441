"""The one definition of a Searcher episode's settings, shared by every room that runs episodes.

``EpisodeConfig`` (turns, search, token budgets), ``RewardOverrides`` (the reward preset and its
per-field overrides) and ``EpisodeBackends`` (which search/generator/judge backends, and how long to
wait for a score) are nested in ``GRPORunConfig``, ``PPORunConfig`` and ``CollectConfig`` as
``cfg.episode``, ``cfg.rewards`` and ``cfg.backends`` (``EpisodeSettings``): every room that runs
episodes holds the same objects instead of copying their fields, and ``ddai train`` reads every
flag's default from them (``ddai_cli/options.py``'s option groups). ``EnvConfig`` and ``RolloutConfig`` take their defaults
from here too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddai.trainer.episode.rewards import RewardSpec


@dataclass(kw_only=True)
class EpisodeConfig:
    """How one episode runs (seed 000: 7 turns in round 1, the last one DDAI's forced completion;
    the number of pages a search returns is the search service's in DDAI, 5 here)."""

    max_turns: int = 7
    """Turns of an episode; with ``force_completion`` the last is DDAI's forced completion, so the
    policy writes at most max_turns − 1 (DDAI's loop)."""
    search_k: int = 5
    """Pages each ``<search>`` returns."""
    force_completion: bool = True
    """The max_turns-th turn is DDAI's forced completion (written by the environment)."""
    restrict_to_doc: bool = False
    """Search only the pages of the prompt's own document."""
    max_turn_tokens: int = 256
    """Most tokens the policy generates in one turn."""
    max_completion_tokens: int = 1024
    """Most completion tokens in one episode, observations included (TRL's
    ``max_completion_length``; DDAI's runs: max_response_length 2048)."""
    obs_max_tokens: int = 256
    """Most tokens of one observation (search results are truncated to it)."""
    crop_pad: int = 0
    """Pixels added to each side of a <bbox> before the page is cropped, in the box's own pixels
    (for image observations the resized image the model saw: DDAI widens the box before scaling
    it to the page), the widened box clamped to the page. 0: the box as written (DDAI's
    training); ddai eval uses DDAI's evaluation's 28."""
    obs_image_max_pixels: int = 512 * 28 * 28
    """Image observations: a page image or <bbox> crop of more pixels than this is scaled down,
    aspect kept, before the processor sees it (DDAI's 512*28*28 = 401408); a <bbox> is then in
    the pixels of the resized image. Crops sent to the generator are resized the same way. 0: no
    bound but the processor's."""
    obs_image_min_pixels: int = 256 * 28 * 28
    """Image observations: a page image or <bbox> crop of fewer pixels than this (a small crop)
    is scaled up, aspect kept (DDAI's 256*28*28 = 200704). 0: no bound but the processor's."""


@dataclass(kw_only=True)
class RewardOverrides:
    """The reward: a preset (``ddai.trainer.episode.rewards.REWARD_PRESETS``) and the fields set
    over it (None: the preset's value)."""

    reward: str = "curriculum"
    """Reward preset: curriculum (0.8 judge + 0.2 NDCG, gated; DDAI's curriculum run had no gate:
    add --no-gate), ddai-phase1 (0.1 + 0.9 NDCG if format passes) or judge-only (DDAI's focused
    rounds)."""
    w_judge: float | None = None
    """Weight of the judge score (overrides the preset's)."""
    w_ndcg: float | None = None
    """Weight of NDCG over the golden pages (overrides the preset's)."""
    w_format: float | None = None
    """Weight of the format check (overrides the preset's)."""
    bias: float | None = None
    """Constant added to the reward (overrides the preset's)."""
    gate: bool | None = None
    """A format failure scores 0 (overrides the preset's)."""

    def reward_spec(self) -> RewardSpec:
        """The preset with this config's overrides applied."""
        # the reward machinery (threads, metrics) loads here, not with the config (``--help``)
        from ddai.trainer.episode.rewards import RewardSpec, reward_preset

        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(RewardSpec)}
        return dataclasses.replace(
            reward_preset(self.reward), **{k: v for k, v in given.items() if v is not None}
        )


@dataclass(kw_only=True)
class EpisodeBackends:
    """The backends an episode calls, by ``ddai.toml`` name (None: the configured default)."""

    search: str | None = None
    """Search backend name from ddai.toml (default: local BM25 over --corpus); a ``search-http``
    backend queries a retrieval service, one batched request per turn."""
    generator: str | None = None
    """Frozen generator backend (answers from the gathered evidence)."""
    judge: str | None = None
    """Judge backend (scores the answer)."""
    reward_timeout: float = 90.0
    """Seconds a step (or a collection batch) waits for a group's streamed judge results; a late
    group's rollouts are unscorable: reward null in the log, left out of the advantages (counted
    as unscorable)."""


@dataclass(kw_only=True)
class EpisodeSettings:
    """What a run that plays episodes holds, nested (``cfg.episode.max_turns``,
    ``cfg.rewards.reward_spec()``, ``cfg.backends.judge``): ``GRPORunConfig``, ``PPORunConfig``
    and ``CollectConfig`` derive from it, so each holds one object of each instead of copies of
    their fields. Keyword-only, so it comes after a run's required fields."""

    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """Turns, search and token budgets of each episode."""
    rewards: RewardOverrides = field(default_factory=RewardOverrides)
    """The reward preset and its overrides."""
    backends: EpisodeBackends = field(default_factory=EpisodeBackends)
    """The search, generator and judge backends, and the score timeout."""

    def check_episode(self) -> None:
        """Refuse a bad crop padding or shown-image bound before any model loads
        (``TrainConfigError`` naming the flag; the environment would refuse it only once built)."""
        from ddai.trainer.common import TrainConfigError

        ep = self.episode
        if error := shown_image_error(
            ep.crop_pad, ep.obs_image_max_pixels, ep.obs_image_min_pixels
        ):
            raise TrainConfigError(error)


@dataclass(kw_only=True)
class PageSettings:
    """What the policy and the frozen generator see of a page, shared by ``GRPORunConfig``,
    ``PPORunConfig`` and ``CollectConfig`` (``ddai.trainer.episode.pages`` reads them): one
    definition of ``--observation``, ``--image-root`` and ``--generator-max-images``."""

    observation: str = "text"
    """``text``: pages shown as text; ``image``: page images through the model's processor (VLM
    policies; needs an image corpus or --image-root; <bbox> is in Qwen2.5-VL's pixels of the
    resized image)."""
    image_root: Path | None = None
    """Folder of page images (``{page_id}.jpg``); not needed with an image corpus (``ddai corpus
    build``). With it (or an image corpus) the generator is sent the pages the episode gathered."""
    generator_max_images: int = 8
    """Most images (pages and crops the episode gathered, latest kept) sent to a multimodal
    generator; 0 sends text only. Text generators ignore images."""

    def check_pages(self) -> None:
        """Refuse bad page settings before any model loads (``TrainConfigError`` naming the flag)."""
        from ddai.trainer.common import TrainConfigError

        if self.observation not in ("text", "image"):
            raise TrainConfigError(f"--observation {self.observation!r}: use text or image")
        if self.generator_max_images < 0:
            raise TrainConfigError(
                f"--generator-max-images {self.generator_max_images}: use 0 or more"
            )


def shown_image_error(crop_pad: int, max_pixels: int, min_pixels: int) -> str | None:
    """What is wrong with the crop padding and the shown images' pixel bounds, naming the flag;
    None when they are usable."""
    if crop_pad < 0:
        return f"--crop-pad {crop_pad}: use 0 or more pixels"
    for flag, px in (("max", max_pixels), ("min", min_pixels)):
        if px < 0:
            return f"--obs-image-{flag}-pixels {px}: use 0 (no bound) or more"
    if 0 < max_pixels < min_pixels:
        return (
            f"--obs-image-max-pixels {max_pixels} is below --obs-image-min-pixels {min_pixels}: "
            "raise the max or lower the min"
        )
    return None


@dataclass(kw_only=True)
class EpisodeInputs:
    """What a run that plays episodes reads, shared by ``GRPORunConfig``, ``PPORunConfig`` and
    ``CollectConfig``: the prompts, the page corpus, how many prompts, and the log store."""

    data: Path
    """Prompts in verl's RL parquet shape (id, prompt, file_name, reference_page, reward_model,
    extra_info)."""
    corpus: Path
    """pages.parquet (or its folder) to search and crop."""
    limit: int | None = None
    """Use only the first N prompts."""
    logs: Path | None = None
    """Log store the run's rollouts go to (default: the workspace's)."""


@dataclass(kw_only=True)
class PreflightSettings:
    """The checks before a run's first episode (``ddai.trainer.episode.preflight``), shared by
    ``GRPORunConfig``, ``PPORunConfig`` and ``CollectConfig``."""

    skip_preflight: bool = False
    """Run without the preflight (golden pages in the corpus and returned by search, pages the
    policy and the generator can read, chat template renders the tags, sampled episodes complete
    and score); a training run records it in its run_config.json."""
    preflight_prompts: int = 2
    """Prompts whose n_agent episodes the preflight samples (4x as many questions are searched)."""
