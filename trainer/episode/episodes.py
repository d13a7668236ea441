"""Searcher episodes for every trainer: ``SearchRollout`` runs lock-step multi-turn rollouts into
its ``ScoreStore`` (``episode.scoring``: the one owner of each episode until its row is logged),
``Episodes`` drives it outside TRL (PPO, collect), and the builders turn an ``EpisodeConfig`` into
the environment's and the rollout's settings.

``SearchRollout`` is also TRL's ``rollout_func`` for GRPO (its ``__call__``); what it reads from the
TRL trainer goes through ``ddai.trainer.trl_compat``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ddai.trainer import trl_compat
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.config import EpisodeBackends, EpisodeConfig
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.logrows import take_rows
from ddai.trainer.episode.rewards import RewardSpec, StreamingScorer
from ddai.trainer.episode.rollout import (
    HFSampler,
    RolloutConfig,
    Trajectory,
    VLLMServerSampler,
    run_rollouts,
    token_truncator,
)
from ddai.trainer.episode.sampling import SamplingConfig, teacher_forced_logprobs
from ddai.trainer.episode.scoring import ScoreStore
from ddai.trainer.episode.tasks import Task
from ddai.trainer.episode.vision import (
    VisionObservationFormat,
    on_device,
    slice_vision,
    vision_batch,
)
from ddai.trainer.runtime import dist


def env_config(cfg: EpisodeConfig, observation: str = "text") -> EnvConfig:
    """The environment's rules for ``cfg``'s episodes."""
    return EnvConfig(
        cfg.max_turns,
        cfg.search_k,
        cfg.force_completion,
        cfg.restrict_to_doc,
        observation,
        crop_pad=cfg.crop_pad,
        obs_image_max_pixels=cfg.obs_image_max_pixels,
        obs_image_min_pixels=cfg.obs_image_min_pixels,
    )


def rollout_config(cfg: EpisodeConfig) -> RolloutConfig:
    """The rollout's token budgets for ``cfg``'s episodes."""
    return RolloutConfig(cfg.max_turn_tokens, cfg.max_completion_tokens, cfg.obs_max_tokens)


@dataclass
class Backends:
    """The search, generator and judge backends a run uses (``ddai.pipelines.backends``)."""

    search: Any
    generator: Any = None
    judge: Any = None


def search_env(
    cfg: Any,
    search: Any,
    corpus: Any,
    tok: Any,
    *,
    image_of: Any = None,
    box_convention: Any = None,
) -> SearchEnv:
    """The environment of ``cfg``'s episodes (a run config with ``episode`` and
    ``PageSettings``): observations cut to the policy's token budget; with ``image_of`` (the
    run's page images, ``episode.pages``) the episodes record the pages they gathered."""
    return SearchEnv(
        search,
        corpus,
        env_config(cfg.episode, cfg.observation),
        truncate=token_truncator(tok, cfg.episode.obs_max_tokens),
        image_of=image_of,
        box_convention=box_convention,
    )


def check_reward_backends(backends: Backends, spec: RewardSpec) -> None:
    """Refuse a judged reward without a generator and a judge (before any model loads)."""
    if spec.needs_judge and (backends.generator is None or backends.judge is None):
        raise TrainConfigError(
            "the reward uses the judge: a generator and a judge backend are needed"
        )


def streaming_scorer(cfg: Any, backends: Backends, spec: RewardSpec) -> StreamingScorer | None:
    """The generator/judge scorer of ``cfg``'s reward (None when it uses no judge), sending a
    multimodal generator at most ``cfg.generator_max_images`` of each episode's images."""
    check_reward_backends(backends, spec)
    if not spec.needs_judge:
        return None
    return StreamingScorer(backends.generator, backends.judge, max_images=cfg.generator_max_images)


def default_backends(cfg: EpisodeBackends, corpus: Any, spec: RewardSpec) -> Backends:
    """The search backend, and the generator and judge when the reward uses the judge. A remote
    generator or judge without its key is refused (``ConfigError``, exit 2) before any model
    loads: every reward call would fail ``no-key``."""
    from ddai.pipelines.backends import get_backend
    from ddai.pipelines.backends.config import require_key, resolve

    search = get_backend("search", cfg.search, corpus=corpus)
    if not spec.needs_judge:
        return Backends(search=search)
    for role, name in (("generator", cfg.generator), ("judge", cfg.judge)):
        require_key(resolve(role, name), role, f"--{role}")
    # Training always calls again what failed before: an outage in an earlier run must not
    # turn into cached failures (null rewards) for this one.
    generator = get_backend(
        "generator", cfg.generator, corpus=corpus, call_site="train.grpo", retry_failed=True
    )
    judge = get_backend("judge", cfg.judge, call_site="train.grpo", retry_failed=True)
    return Backends(search=search, generator=generator, judge=judge)


class SearchRollout:
    """TRL ``rollout_func``: runs the batch's episodes into ``store`` (a ``ScoreStore`` over
    ``spec`` and ``scorer``), which keeps them until their rows are logged."""

    def __init__(
        self,
        *,
        tokenizer: Any,
        env: SearchEnv,
        rollout: RolloutConfig,
        spec: RewardSpec,
        scorer: StreamingScorer | None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        vision: VisionObservationFormat | None = None,
    ) -> None:
        self.tok = tokenizer
        self.env = env
        self.vision = vision
        self.vision_fields: dict[str, Any] | None = None
        """The last batch's images in TRL's layout (``vision_batch``), rows in batch order."""
        self.env_masks: list[list[int]] | None = None
        """The last batch's ``env_mask`` per rollout (1: a policy token), the rows TRL scores
        next: its old and reference log-prob passes run the LM head over those tokens only."""
        self.rollout = rollout
        self.store = ScoreStore(spec, scorer)
        self.sampling = {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "min_p": min_p,
            "repetition_penalty": repetition_penalty,
        }
        self.sampler: Any = None
        """A fixed sampler (e.g. an OpenAI-compatible server's) instead of the policy's."""

    @property
    def sampling_config(self) -> SamplingConfig:
        """The distribution the policy's own samplers draw from, every processor explicit (the
        loss scores the rollouts under the same one: ``trl_compat``)."""
        image_id = self.vision.image_token_id if self.vision else None
        return SamplingConfig(
            temperature=self.sampling["temperature"],
            top_p=self.sampling["top_p"],
            top_k=self.sampling["top_k"] or 0,
            min_p=self.sampling["min_p"] or 0.0,
            repetition_penalty=self.sampling["repetition_penalty"],
            suppress_ids=() if image_id is None else (int(image_id),),
        )

    def _sampler(self, trainer: Any, model: Any) -> Any:
        if self.sampler is not None:
            return self.sampler
        stop = [self.tok.eos_token_id]
        if getattr(trainer, "use_vllm", False):
            # TRL creates the client on the main process only; the sampler gathers to it.
            acc = trainer.accelerator
            gen = trainer.vllm_generation
            client = getattr(gen, "vllm_client", None) if acc.is_main_process else None
            return VLLMServerSampler(client, stop_ids=stop, accelerator=acc, **self.sampling)
        image_id = self.vision.image_token_id if self.vision else None
        return HFSampler(model, self.tok, stop_ids=stop, image_token_id=image_id, **self.sampling)

    def run(self, tasks: list[tuple[Task, int, int]], trainer: Any, model: Any) -> list[Trajectory]:
        """Run one episode per ``(task, group, index)`` slot; the store keeps them, each group
        sent to the judge as it finishes."""
        trajs = run_rollouts(
            tasks,
            sampler=self._sampler(trainer, model),
            tokenizer=self.tok,
            env=self.env,
            config=self.rollout,
            on_group_done=self.store.submit,
            vision=self.vision,
            # Lock-step across ranks: the same number of turns everywhere, so sharded
            # generation's collectives line up.
            any_active=dist.any_across_ranks if dist.world_size() > 1 else None,
        )
        self.store.keep(trajs)
        return trajs

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        inputs, G = trl_compat.rollout_inputs(trainer)
        slots = [(Task.from_row(inp), i // G, i % G) for i, inp in enumerate(inputs)]
        with trl_compat.generation_model(trainer) as model:
            trajs = self.run(slots, trainer, model)
        shown = [t.images() or (None, None) for t in trajs]
        self.vision_fields = vision_batch([p for p, _ in shown], [g for _, g in shown])
        self.env_masks = [t.env_mask for t in trajs]
        return {
            "prompt_ids": [t.prompt_ids for t in trajs],
            "completion_ids": [t.completion_ids for t in trajs],
            "logprobs": [t.logprobs for t in trajs],
            "env_mask": [t.env_mask for t in trajs],
            "episode_key": [t.key for t in trajs],
        }

    # What ``trl_compat``'s ``DdaiGRPOTrainer`` asks of its rollout: the fence imports nothing of
    # the episode layer, it is handed these pieces.

    def take_rows(
        self, keys: list[str], advantages: list[float], **kwargs: Any
    ) -> list[dict[str, Any]]:
        """The log rows of episodes ``keys`` taken out of the store (``logrows.take_rows``)."""
        return take_rows(self.store, keys, advantages, **kwargs)

    def vision_chunk(
        self, fields: dict[str, Any], start: int, end: int, device: Any
    ) -> dict[str, Any]:
        """Rollouts ``start:end`` of a batch's image fields (``slice_vision``, on the CPU where
        they lie), moved to ``device``; ``{}`` when those rollouts saw no image."""
        return on_device(slice_vision(fields, start, end) or {}, device)

    def teacher_forced_logprobs(
        self, logits: Any, input_ids: Any, pad: list[int], *, entropy: bool
    ) -> tuple[Any, Any]:
        """``sampling.teacher_forced_logprobs`` under this rollout's ``sampling_config``."""
        return teacher_forced_logprobs(
            logits, input_ids, pad, self.sampling_config, entropy=entropy
        )


class Episodes:
    """Episodes and their rewards outside TRL (``ddai train ppo``, ``ddai collect``): the
    search environment's lock-step rollout and the streamed generator/judge reward, as in GRPO."""

    def __init__(
        self,
        cfg: Any,
        tok: Any,
        corpus: Any,
        backends: Any,
        *,
        sampler: Any = None,
        image_of: Any = None,
        vision: VisionObservationFormat | None = None,
        box_convention: Any = None,
    ) -> None:
        """``cfg``: a run config holding ``episode``, ``rewards`` and ``backends`` (the nested
        configs of ``episode.config``), its ``PageSettings`` and a ``temperature``; ``sampler``:
        generate through it instead of the policy passed to ``collect``; ``image_of``, ``vision``
        and ``box_convention``: the run's page images and VLM observation format
        (``episode.pages``), as in GRPO."""
        spec = cfg.rewards.reward_spec()
        env = search_env(
            cfg, backends.search, corpus, tok, image_of=image_of, box_convention=box_convention
        )
        self.scorer = streaming_scorer(cfg, backends, spec)  # last: it starts a worker
        self.rollout = SearchRollout(
            tokenizer=tok,
            env=env,
            rollout=rollout_config(cfg.episode),
            spec=spec,
            scorer=self.scorer,
            temperature=cfg.temperature,
            vision=vision,
        )
        self.rollout.sampler = sampler
        self.store = self.rollout.store
        self.timeout = cfg.backends.reward_timeout

    def collect(
        self, slots: list[tuple[Task, int, int]], policy: Any
    ) -> tuple[list[Any], list[float], dict[str, float]]:
        """Run one episode per slot; ``(trajectories, rewards, ddai/... reward metrics)``."""
        trajs = self.rollout.run(slots, None, policy)
        rewards, metrics = asyncio.run(self.store.score([t.key for t in trajs], self.timeout))
        return trajs, rewards, metrics

    def close(self) -> None:
        if self.scorer is not None:
            self.scorer.close()
