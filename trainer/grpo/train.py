"""``ddai train grpo``: TRL's ``GRPOTrainer`` over the multi-turn search environment.

TRL runs the optimisation (group advantages, the GRPO/GSPO loss, KL, entropy, checkpoints);
ddai supplies

- ``SearchRollout``: the ``rollout_func``: ``n_agent`` episodes per prompt in lock-step batches,
  returning prompt/completion ids, sampling log-probs and ``env_mask`` (1 on policy tokens, 0 on
  every observation token), which TRL multiplies into the loss mask (state masking);
- ``DdaiReward``: an async reward function awaiting the streamed generator/judge calls;
- ``DdaiGRPOTrainer``: a thin subclass that hands the rollout the batch's task columns and appends
  every step's rollouts, with TRL's advantages, to the rollout log. With image observations it
  also feeds the images each rollout was shown (``pixel_values``, ``image_grid_thw``) into every
  log-prob forward pass (old, reference and loss), which TRL's ``rollout_func`` path does not.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines import workspace
from ddai.trainer import common
from ddai.trainer.runtime import dist
from ddai.trainer.search.env import EnvConfig, SearchEnv
from ddai.trainer.search.logrows import rollout_row
from ddai.trainer.search.preflight import (
    PreflightReport,
    SampledEpisode,
    ZeroVarianceSteps,
    check_chat_template,
    check_episodes,
    check_golden_pages,
    check_search,
    sample,
    write_run_config,
)
from ddai.trainer.search.rewards import (
    Judged,
    RewardSpec,
    StreamingScorer,
    compute_reward,
    reward_preset,
    unscorable_reason,
)
from ddai.trainer.search.rollout import (
    HFSampler,
    RolloutConfig,
    Trajectory,
    VLLMServerSampler,
    run_rollouts,
)
from ddai.trainer.search.tasks import Task, load_tasks
from ddai.trainer.search.vision import (
    ResizedPixels,
    VisionObservationFormat,
    on_device,
    page_image_path,
    slice_vision,
    vision_batch,
)

# Seed 000's focused-round optimiser: sequence-level ratio (GSPO), clip 3e-4/4e-4, lr 1e-6, no KL,
# no entropy bonus, and its mini-batch structure: verl's ``ppo_mini_batch_size=8`` prompts out of a
# 16-prompt rollout batch (focused round 1) is two optimizer steps per rollout batch. Without it the
# old log-probs equal the current ones at every step and the tiny clip never acts. TRL's
# ``steps_per_generation``: one generation of ``batch_size × steps_per_generation`` rollouts, then
# that many optimizer steps of ``batch_size`` rollouts each (round 3's 32/8 is ``--set
# steps_per_generation=4``).
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "gspo-ddai": {
        "steps_per_generation": 2,
        "importance_sampling_level": "sequence",
        "loss_type": "grpo",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "learning_rate": 1e-6,
        "beta": 0.0,
        "entropy_coef": 0.0,
    },
    "grpo": {"importance_sampling_level": "token", "loss_type": "grpo", "beta": 0.0},
}


def train_preset(name: str | None) -> dict[str, Any]:
    if name is None:
        return {}
    try:
        return dict(TRAIN_PRESETS[name])
    except KeyError:
        raise common.TrainConfigError(
            f"unknown --preset {name!r}; known: {', '.join(sorted(TRAIN_PRESETS))}"
        ) from None


@dataclass
class GRPORunConfig:
    """One GRPO run; every field has a flag in ``ddai train grpo``."""

    model: str
    data: Path
    """Prompts in verl's RL parquet shape."""
    corpus: Path
    """``pages.parquet`` (or its folder) the search backend and crops read."""
    output_dir: Path
    run_id: str | None = None
    logs: Path | None = None
    preset: str | None = None
    reward: str = "curriculum"
    w_judge: float | None = None
    w_ndcg: float | None = None
    w_format: float | None = None
    bias: float | None = None
    gate: bool | None = None
    n_agent: int | None = None
    batch_size: int | None = None
    """Rollouts per device step (prompts × n_agent)."""
    max_steps: int | None = None
    learning_rate: float | None = None
    epsilon: float | None = None
    epsilon_high: float | None = None
    beta: float | None = None
    entropy_coef: float | None = None
    importance_sampling_level: str | None = None
    loss_type: str | None = None
    temperature: float | None = None
    max_turns: int = 7
    search_k: int = 5
    force_completion: bool = True
    restrict_to_doc: bool = False
    observation: str = "text"
    """``image``: show page images through the model's processor (VLM policies)."""
    image_root: Path | None = None
    """Folder of page images named as ``Corpus.image_path`` names them (image observations);
    not needed when the corpus holds its images (``ddai corpus build``)."""
    generator_max_images: int = 8
    """Most images (pages and crops, the latest kept) sent to a multimodal generator."""
    max_turn_tokens: int = 256
    max_completion_tokens: int = 1024
    obs_max_tokens: int = 256
    search: str | None = None
    generator: str | None = None
    judge: str | None = None
    reward_timeout: float = 90.0
    vllm: str | None = None
    """``server``: generate through a running ``trl vllm-serve`` (GPU machines)."""
    vllm_server_base_url: str | None = None
    limit: int | None = None
    seed: int = 0
    save_steps: int | None = None
    logging_steps: int | None = None
    report_to: str | None = None
    resume: bool = False
    dtype: str = "float32"
    lora: bool = False
    """Train a LoRA adapter (peft, float32) on frozen weights; the merged model is saved."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target: str = "all-linear"
    repetition_penalty: float | None = None
    """Sampling repetition penalty (explicit; the checkpoint's own is never applied)."""
    config_file: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    skip_preflight: bool = False
    """Train without the preflight checks (``ddai.trainer.search.preflight``); recorded in the run config."""
    preflight_prompts: int = 2
    """Prompts whose ``n_agent`` episodes the preflight samples (and 4× as many for search)."""


@dataclass
class Backends:
    """The search, generator and judge backends a run uses (``ddai.pipelines.backends``)."""

    search: Any
    generator: Any = None
    judge: Any = None


@dataclass
class GRPOResult:
    output_dir: str
    run_id: str
    logs: str
    steps: int
    rollouts_logged: int
    reward_first: float | None
    reward_last: float | None
    changed_parameters: int
    zero_variance_steps: int = 0
    """Steps whose groups all had zero reward variance (no learning signal)."""
    preflight: str = "skipped"
    """``passed``, ``passed with warnings: …`` or ``skipped``."""
    search_errors: int = 0
    """Searches that failed (service errors, timeouts) and were shown as ``[System Error: …]``."""
    unscorable: int = 0
    """Rollouts that needed a judge score and got none (timeout, failure): no reward, left out of
    group normalization."""
    informative_group_share: float | None = None
    """Share of prompt groups with reward variance (the only ones GRPO learns from)."""
    clip_ratio: float | None = None
    """Mean over logged steps of TRL's ``clip_ratio/region_mean`` (share clipped)."""


# ---------------------------------------------------------------------------- config


def reward_spec(cfg: GRPORunConfig) -> RewardSpec:
    base = reward_preset(cfg.reward)
    return RewardSpec(
        w_judge=base.w_judge if cfg.w_judge is None else cfg.w_judge,
        w_ndcg=base.w_ndcg if cfg.w_ndcg is None else cfg.w_ndcg,
        w_format=base.w_format if cfg.w_format is None else cfg.w_format,
        bias=base.bias if cfg.bias is None else cfg.bias,
        gate=base.gate if cfg.gate is None else cfg.gate,
    )


def grpo_args(cfg: GRPORunConfig) -> Any:
    """TRL ``GRPOConfig`` from defaults < preset < config file < flags < ``--set``."""
    from trl import GRPOConfig

    file_layer = common.load_config_file(cfg.config_file)
    common.check_keys(GRPOConfig, file_layer, str(cfg.config_file))
    common.check_keys(GRPOConfig, cfg.overrides, "--set")
    flags = {
        "num_generations": cfg.n_agent,
        "per_device_train_batch_size": cfg.batch_size,
        "max_steps": cfg.max_steps,
        "learning_rate": cfg.learning_rate,
        "epsilon": cfg.epsilon,
        "epsilon_high": cfg.epsilon_high,
        "beta": cfg.beta,
        "entropy_coef": cfg.entropy_coef,
        "importance_sampling_level": cfg.importance_sampling_level,
        "loss_type": cfg.loss_type,
        "temperature": cfg.temperature,
        "repetition_penalty": cfg.repetition_penalty,
        "save_steps": cfg.save_steps,
        "logging_steps": cfg.logging_steps,
        "report_to": cfg.report_to,
    }
    if cfg.vllm is not None:
        if cfg.vllm != "server":
            raise common.TrainConfigError(f"--vllm {cfg.vllm!r}: only `server` is supported")
        flags.update(
            use_vllm=True, vllm_mode="server", vllm_server_base_url=cfg.vllm_server_base_url
        )
    defaults = {
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "loss_type": "grpo",
        "logging_steps": 1,
        "save_steps": 30,
        "save_strategy": "steps",
        "save_total_limit": 2,
        "disable_tqdm": True,
        "max_completion_length": cfg.max_completion_tokens,
        # Activations recomputed in the backward pass: a training forward keeps one layer's
        # activations instead of all of them (``--set activation_checkpointing=false`` to trade
        # back; transformers' new name for gradient checkpointing).
        "activation_checkpointing": True,
        **common.device_defaults(),
    }
    preset = train_preset(cfg.preset)
    if any(layer.get("generation_batch_size") is not None for layer in (file_layer, cfg.overrides)):
        # TRL takes one of the two; the user's generation batch wins over the preset's structure.
        preset.pop("steps_per_generation", None)
    merged = common.merge_layers(defaults, preset, file_layer, flags, cfg.overrides)
    user = {**file_layer, **cfg.overrides}
    if "gradient_checkpointing" in user and "activation_checkpointing" not in user:
        # transformers' old name would lose to the new one set by default above.
        merged["activation_checkpointing"] = merged.pop("gradient_checkpointing")
    integrations, _ = common.split_report_to(merged.pop("report_to", None))
    merged.update(output_dir=str(cfg.output_dir), report_to=integrations, seed=cfg.seed)
    batch, group = merged["per_device_train_batch_size"], merged["num_generations"]
    if batch % group:
        raise common.TrainConfigError(
            f"--batch-size {batch} must be a multiple of --n-agent {group} "
            "(rollouts per step = prompts × n_agent)"
        )
    return GRPOConfig(**merged)


# ---------------------------------------------------------------------------- rollout and reward


class SearchRollout:
    """TRL ``rollout_func``: runs the batch's episodes and keeps them until their rows are logged."""

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
        repetition_penalty: float = 1.0,
        vision: VisionObservationFormat | None = None,
    ) -> None:
        self.tok = tokenizer
        self.env = env
        self.vision = vision
        self.vision_fields: dict[str, Any] | None = None
        """The last batch's images in TRL's layout (``vision_batch``), rows in batch order."""
        self.rollout = rollout
        self.spec = spec
        self.scorer = scorer
        self.sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        self.repetition_penalty = repetition_penalty
        self.pending: dict[str, Trajectory] = {}
        self.futures: dict[str, tuple[Any, int]] = {}
        self.judged: dict[str, Judged] = {}
        self.scores: dict[str, Any] = {}
        self.sampler: Any = None
        """A fixed sampler (e.g. an OpenAI-compatible server's) instead of the policy's."""

    def _submit(self, group: list[Trajectory]) -> None:
        if self.scorer is None or not self.spec.needs_judge:
            return
        items = [
            {
                "question": t.task.question,
                "reference": t.task.reference_answer,
                "evidence": t.episode.evidence,
                "images": t.episode.images,
                "skip": self.spec.gate and not t.episode.format_ok,
            }
            for t in group
        ]
        fut = self.scorer.submit(items)
        for i, t in enumerate(group):
            self.futures[t.key] = (fut, i)

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
        return HFSampler(
            model,
            self.tok,
            stop_ids=stop,
            image_token_id=image_id,
            repetition_penalty=self.repetition_penalty,
            **self.sampling,
        )

    def run(self, tasks: list[tuple[Task, int, int]], trainer: Any, model: Any) -> list[Trajectory]:
        return run_rollouts(
            tasks,
            sampler=self._sampler(trainer, model),
            tokenizer=self.tok,
            env=self.env,
            config=self.rollout,
            on_group_done=self._submit,
            vision=self.vision,
            # Lock-step across ranks: the same number of turns everywhere, so sharded
            # generation's collectives line up.
            any_active=dist.any_across_ranks if dist.world_size() > 1 else None,
        )

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        from trl.models import unwrap_model_for_generation

        inputs = trainer.ddai_inputs
        G = trainer.num_generations
        if not trainer.model.training:
            G = trainer.num_generations_eval or G
        slots = [(Task.from_row(inp), i // G, i % G) for i, inp in enumerate(inputs)]
        # As TRL's own generation: ZeRO-3 parameters gathered, FSDP v1 root parameters summoned.
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            ) as model,
            trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),
        ):
            trajs = self.run(slots, trainer, model)
        for t in trajs:
            self.pending[t.key] = t
        self.vision_fields = vision_batch(
            [im[0] if (im := t.images()) else None for t in trajs],
            [im[1] if (im := t.images()) else None for t in trajs],
        )
        return {
            "prompt_ids": [t.prompt_ids for t in trajs],
            "completion_ids": [t.completion_ids for t in trajs],
            "logprobs": [t.logprobs for t in trajs],
            "env_mask": [t.env_mask for t in trajs],
            "episode_key": [t.key for t in trajs],
        }

    def pop(self, key: str) -> tuple[Trajectory, Judged | None, Any]:
        self.futures.pop(key, None)
        return self.pending.pop(key), self.judged.pop(key, None), self.scores.pop(key, None)


class DdaiReward:
    """Async TRL reward function: awaits each group's streamed judge result (with a timeout),
    then computes ``compute_reward``. A rollout that needed a judge score and got none (timeout,
    failure) is unscorable: None, which TRL leaves out of group normalization (advantage 0).
    Logs ``ddai/judge``, ``ddai/ndcg``, ``ddai/format_ok``, ``ddai/judge_coverage`` (share of
    rollouts needing a judge score that got one in time) and ``ddai/unscorable`` (their count)."""

    __name__ = "ddai_reward"

    def __init__(self, rollout: SearchRollout, timeout: float) -> None:
        self.rollout = rollout
        self.timeout = timeout

    async def __call__(self, prompts, completions, episode_key, log_metric=None, **kwargs):
        ro = self.rollout
        trajs = [ro.pending[k] for k in episode_key]
        futs = {id(f): f for k in episode_key if (f := ro.futures.get(k, (None, 0))[0]) is not None}
        if futs:
            waiters = [asyncio.wrap_future(f) for f in futs.values()]
            _, late = await asyncio.wait(waiters, timeout=self.timeout)
            for w in late:
                w.cancel()
        needed = scored = 0
        rewards = []
        for t in trajs:
            judged = None
            if t.key in ro.futures:
                fut, i = ro.futures[t.key]
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    judged = fut.result()[i]
                else:
                    judged = Judged(
                        error="timeout"
                        if not fut.done() or fut.cancelled()
                        else str(fut.exception())
                    )
                if not (ro.spec.gate and not t.episode.format_ok):
                    needed += 1
                    scored += judged.judge is not None
            score = compute_reward(
                ro.spec,
                format_ok=t.episode.format_ok,
                retrieved=t.episode.retrieved,
                golden=t.task.reference_pages,
                judge=judged.judge if judged else None,
            )
            score.unscorable = unscorable_reason(
                ro.spec, format_ok=t.episode.format_ok, judged=judged
            )
            if judged is not None:
                ro.judged[t.key] = judged
            ro.scores[t.key] = score
            rewards.append(None if score.unscorable else score.reward)
        if log_metric is not None and trajs:
            n = len(trajs)
            log_metric("ddai/ndcg", sum(ro.scores[t.key].ndcg for t in trajs) / n)
            log_metric("ddai/format_ok", sum(t.episode.format_ok for t in trajs) / n)
            log_metric("ddai/num_turns", sum(len(t.episode.turns) for t in trajs) / n)
            if needed:
                log_metric("ddai/judge_coverage", scored / needed)
                log_metric("ddai/unscorable", float(needed - scored))
                log_metric("ddai/judge", sum(ro.scores[t.key].parts["judge"] for t in trajs) / n)
        return rewards


def _trainer_class() -> type:
    from trl import GRPOTrainer

    from ddai.trainer.trl_compat import check_trl_internals

    check_trl_internals(GRPOTrainer)

    class DdaiGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that shows the rollout its batch and logs the scored rollouts."""

        def __init__(
            self, *args, ddai_rollout: SearchRollout, ddai_log: RolloutLog | None, **kwargs
        ):
            super().__init__(*args, rollout_func=ddai_rollout, **kwargs)
            self.ddai_rollout = ddai_rollout
            self.ddai_log = ddai_log
            self.ddai_inputs: list[dict[str, Any]] = []
            self.ddai_zero_variance = ZeroVarianceSteps()

        def _generate_and_score_completions(self, inputs):
            self.ddai_inputs = inputs
            self.ddai_rollout.vision_fields = None
            out = super()._generate_and_score_completions(inputs)
            if self.ddai_rollout.vision_fields is not None:
                # TRL shuffles, splits and re-joins these per rollout (``num_images``), then hands
                # them back to ``_get_per_token_logps_and_entropies`` in the loss.
                out.update(self.ddai_rollout.vision_fields)
                self.ddai_rollout.vision_fields = None
            advantages = out["advantages"].detach().float().cpu().tolist()
            step = int(self.state.global_step) + 1
            # TRL gives each rank a contiguous slice of the global batch (``process_slice``), so
            # rank r's i-th rollout is row r·len(inputs) + i of the step's generation batch.
            rank = self.accelerator.process_index
            offset = rank * len(inputs)
            rows = []
            groups: dict[int, list[float]] = {}
            for i, (inp, adv) in enumerate(zip(inputs, advantages, strict=True)):
                traj, judged, score = self.ddai_rollout.pop(inp["episode_key"])
                if score is not None and not score.unscorable:
                    groups.setdefault(traj.group, []).append(score.reward)
                if self.ddai_log is not None:
                    row = rollout_row(
                        traj,
                        run_id=self.ddai_log.run_id,
                        step=step,
                        advantage=adv,
                        sample_idx=offset + i,
                        judged=judged,
                        score=score,
                    )
                    row["extra"].update(rank=rank, rank_seed=dist.rank_seed(self.args.seed, rank))
                    rows.append(row)
            if self.ddai_log is not None:
                # Every rank's episodes to the main process, written once (collective).
                rows = dist.gather_objects(rows)
                if self.accelerator.is_main_process:
                    self.ddai_log.append(rows)
            if self.model.training:
                # A step is flat when every group on every rank is (collective).
                all_groups = dist.gather_objects(list(groups.values()))
                if self.accelerator.is_main_process:
                    self.ddai_zero_variance.observe(step, all_groups)
            return out

        def _get_per_token_logps_and_entropies(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs
        ):
            """Log-probs with the rollout's images: those of the batch being scored (old and
            reference log-probs) or those carried in ``inputs`` (the loss)."""
            import torch

            if self.ddai_rollout.vision is None:
                # Not an image-observation run: TRL's own path, with whatever images it was given.
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs
                )
            kwargs.pop("mm_token_type_ids", None)  # rebuilt per chunk from the ids
            fields = {k: kwargs.pop(k, None) for k in ("pixel_values", "image_grid_thw")}
            fields["num_images"] = kwargs.pop("num_images", None)
            if fields["pixel_values"] is None:
                fields = self.ddai_rollout.vision_fields
            if fields is None:
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs
                )
            image_id = self.ddai_rollout.vision.image_token_id
            size = batch_size or input_ids.size(0)
            parts = []
            # Chunk here, not in TRL, so that chunks without an image go through text-only.
            for start in range(0, input_ids.size(0), size):
                end = min(start + size, input_ids.size(0))
                ids = input_ids[start:end]
                # Sliced where the fields lie (the CPU), then moved to the ids' device: the
                # processor's tensors never reach the model on another device.
                chunk = on_device(slice_vision(fields, start, end) or {}, ids.device)
                if chunk:
                    chunk["mm_token_type_ids"] = (ids == image_id).long()
                parts.append(
                    super()._get_per_token_logps_and_entropies(
                        model,
                        ids,
                        attention_mask[start:end],
                        logits_to_keep,
                        end - start,
                        **kwargs,
                        **chunk,
                    )
                )
            logps = torch.cat([p[0] for p in parts])
            ent = torch.cat([p[1] for p in parts]) if parts[0][1] is not None else None
            aux = torch.stack([p[2] for p in parts]).mean() if parts[0][2] is not None else None
            return logps, ent, aux

    return DdaiGRPOTrainer


@dataclass
class RolloutLog:
    """Appends each step's rollouts to the log store as one run."""

    logs: Path
    run_id: str
    rows: int = 0
    rewards: list[float] = field(default_factory=list)
    search_errors: int = 0
    unscorable: int = 0

    def append(self, rows: list[dict[str, Any]]) -> None:
        from ddai.pipelines.store import write_run

        if not rows:
            return
        write_run(self.logs, self.run_id, rows, append=True)
        self.rows += len(rows)
        self.search_errors += sum(r["extra"].get("search_errors", 0) for r in rows)
        self.unscorable += sum("unscorable" in r["extra"] for r in rows)
        rs = [r["reward"] for r in rows if r["reward"] is not None]
        if rs:
            self.rewards.append(sum(rs) / len(rs))


def load_vision_policy(
    name_or_path: str, *, dtype: str = "float32"
) -> tuple[Any, Any, VisionObservationFormat]:
    """A VLM policy, its tokenizer and its processor's observation format (needs torchvision for
    real checkpoints' processors)."""
    from ddai.trainer.modeling import load_vision_model

    model, processor = load_vision_model(name_or_path, dtype=dtype)
    return model, processor.tokenizer, VisionObservationFormat.from_processor(processor)


def page_images(cfg: GRPORunConfig, corpus: Any) -> Any:
    """``image_of(page_id)`` for the run's page images, or None when it has none: the corpus's own
    image (an image corpus), else ``{page_id}.jpg`` under ``--image-root`` (a search service may
    return pages the corpus lacks)."""
    root = Path(cfg.image_root) if cfg.image_root is not None else None
    if root is not None and not root.is_dir():
        root = None
    if not corpus.has_images and root is None:
        return None

    def image_of(pid: str) -> Path:
        own = corpus.image_file(pid) if pid in corpus else None
        if own is not None:
            return own
        if root is not None:
            return page_image_path(root, f"{pid}.jpg")
        raise KeyError(f"page {pid!r} has no image in --corpus {cfg.corpus}; add --image-root DIR")

    return image_of


def static_preflight(
    report: PreflightReport,
    tasks: list[Task],
    corpus: Any,
    corpus_name: str,
    search: Any,
    *,
    k: int,
    restrict_to_doc: bool,
    prompts: int,
    seed: int,
) -> None:
    """The checks that need no model: golden pages in the corpus, then search over a sample of
    questions (skipped when the pages are missing: the search could not find them anyway)."""
    cov = check_golden_pages(report, tasks, corpus, corpus_name)
    if cov.ok:
        picked = sample(tasks, 4 * prompts, seed, need_golden=True)
        check_search(report, picked, search, k=k, restrict_to_doc=restrict_to_doc)


def sampled_episodes(
    rollout: SearchRollout,
    slots: list[tuple[Task, int, int]],
    trainer: Any,
    model: Any,
    timeout: float,
) -> list[SampledEpisode]:
    """Run and score ``slots`` the way a training step does, without logging or training."""
    trajs = rollout.run(slots, trainer, model)
    for t in trajs:
        rollout.pending[t.key] = t
    asyncio.run(DdaiReward(rollout, timeout)(None, None, [t.key for t in trajs]))
    out = []
    for t in trajs:
        _, judged, score = rollout.pop(t.key)
        fmt = t.episode.format_ok
        out.append(
            SampledEpisode(
                group=t.group,
                reward=score.reward,
                format_ok=fmt,
                needs_judge=rollout.spec.needs_judge and not (rollout.spec.gate and not fmt),
                error=judged.error if judged else None,
            )
        )
    return out


def preflight_slots(
    tasks: list[Task], prompts: int, n_agent: int, seed: int
) -> list[tuple[Task, int, int]]:
    """``n_agent`` episodes for each of a seeded sample of ``prompts`` prompts."""
    return [(t, g, i) for g, t in enumerate(sample(tasks, prompts, seed)) for i in range(n_agent)]


def preflight_status(report: PreflightReport) -> str:
    if report.skipped:
        return "skipped"
    if report.warnings:
        return "passed with warnings: " + "; ".join(w.line() for w in report.warnings)
    return "passed"


def default_backends(cfg: GRPORunConfig, corpus: Any, spec: RewardSpec) -> Backends:
    from ddai.pipelines.backends import get_backend

    search = get_backend("search", cfg.search, corpus=corpus)
    if not spec.needs_judge:
        return Backends(search=search)
    # Training always calls again what failed before: an outage in an earlier run must not
    # turn into cached failures (null rewards) for this one.
    generator = get_backend(
        "generator", cfg.generator, corpus=corpus, call_site="train.grpo", retry_failed=True
    )
    judge = get_backend("judge", cfg.judge, call_site="train.grpo", retry_failed=True)
    return Backends(search=search, generator=generator, judge=judge)


def run_grpo(cfg: GRPORunConfig, backends: Backends | None = None) -> GRPOResult:
    """Train with GRPO; save the final model to ``output_dir``; log rollouts to the store."""
    from datasets import Dataset

    from ddai.pipelines.corpus import Corpus
    from ddai.trainer.modeling import (
        changed_parameters,
        check_update_precision,
        load_policy,
        lora_config,
        parameter_snapshot,
    )
    from ddai.trainer.runtime.train_metrics import TrainMetricsLog
    from ddai.trainer.search.rollout import token_truncator
    from ddai.trainer.sft.train import merged_lora, save_final, save_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = grpo_args(cfg)
    dist.allow_fsdp_on_cpu(args)
    resume_from = common.resume_checkpoint(cfg.output_dir, cfg.resume)
    spec = reward_spec(cfg)
    tasks = load_tasks(cfg.data, cfg.limit)
    if not tasks:
        raise common.TrainConfigError(f"--data {cfg.data}: no prompts")
    corpus = Corpus.load(cfg.corpus)
    backends = backends or default_backends(cfg, corpus, spec)
    if spec.needs_judge and (backends.generator is None or backends.judge is None):
        raise common.TrainConfigError(
            "the reward uses the judge: a generator and a judge backend are needed"
        )
    vision = box_convention = None
    image_of = page_images(cfg, corpus)

    report = PreflightReport(skipped=cfg.skip_preflight)
    if not cfg.skip_preflight:
        static_preflight(
            report,
            tasks,
            corpus,
            str(cfg.corpus),
            backends.search,
            k=cfg.search_k,
            restrict_to_doc=cfg.restrict_to_doc,
            prompts=cfg.preflight_prompts,
            seed=cfg.seed,
        )
        report.raise_errors()
    if cfg.observation == "image":
        if image_of is None:
            raise common.TrainConfigError(
                f"--image-root {cfg.image_root}: not a folder; point it at the page images, or "
                "build an image corpus with `ddai corpus build` (image observations need them)"
            )
        model, tok, vision = load_vision_policy(cfg.model, dtype=cfg.dtype)
        box_convention = ResizedPixels.from_image_processor(vision.processor.image_processor)
    elif cfg.observation == "text":
        model, tok = load_policy(cfg.model, dtype=cfg.dtype)
    else:
        raise common.TrainConfigError(f"--observation {cfg.observation!r}: use text or image")
    peft_config = None
    if cfg.lora:
        peft_config = lora_config(
            r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target=cfg.lora_target
        )
    else:
        check_update_precision(model, args.learning_rate)
    if not cfg.skip_preflight:
        templater = vision.processor if vision is not None else tok
        check_chat_template(
            report,
            lambda msgs: templater.apply_chat_template(msgs, tokenize=False),
            tok,
            tasks[0].messages,
        )
        report.raise_errors()
    env = SearchEnv(
        backends.search,
        corpus,
        EnvConfig(
            cfg.max_turns,
            cfg.search_k,
            cfg.force_completion,
            cfg.restrict_to_doc,
            cfg.observation,
        ),
        truncate=token_truncator(tok, cfg.obs_max_tokens),
        image_of=image_of,
        box_convention=box_convention,
    )
    scorer = (
        StreamingScorer(backends.generator, backends.judge, max_images=cfg.generator_max_images)
        if spec.needs_judge
        else None
    )
    rollout = SearchRollout(
        tokenizer=tok,
        env=env,
        rollout=RolloutConfig(cfg.max_turn_tokens, cfg.max_completion_tokens, cfg.obs_max_tokens),
        spec=spec,
        scorer=scorer,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k or 0,
        repetition_penalty=args.repetition_penalty,
        vision=vision,
    )
    run_id = cfg.run_id or f"grpo_{time.strftime('%Y%m%d_%H%M%S')}"
    log = RolloutLog(workspace.logs_dir(cfg.logs), run_id)
    _, metrics_file = common.split_report_to(cfg.report_to)
    step_metrics = TrainMetricsLog(log.logs, run_id)
    trainer = _trainer_class()(
        model=model,
        reward_funcs=[DdaiReward(rollout, cfg.reward_timeout)],
        args=args,
        train_dataset=Dataset.from_list([t.to_row() for t in tasks]),
        processing_class=tok,
        peft_config=peft_config,
        callbacks=[*common.build_callbacks(cfg.output_dir, metrics_file), step_metrics],
        ddai_rollout=rollout,
        ddai_log=log,
    )
    common.finish_trainer_setup(trainer)
    try:
        if not cfg.skip_preflight:
            from trl.models import unwrap_model_for_generation

            slots = preflight_slots(tasks, cfg.preflight_prompts, args.num_generations, cfg.seed)
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as m:
                check_episodes(
                    report, sampled_episodes(rollout, slots, trainer, m, cfg.reward_timeout)
                )
            report.raise_errors()
        if trainer.accelerator.is_main_process:
            write_run_config(cfg.output_dir, "train grpo", cfg, report)
    except BaseException:
        if scorer is not None:
            scorer.close()
        raise
    # Digests, not copies, of the trainable weights (with LoRA: the adapter's only).
    before = parameter_snapshot(trainer.model)
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    finally:
        if scorer is not None:
            scorer.close()
    changed = len(changed_parameters(before, trainer.model))  # collective under FSDP
    if cfg.lora:
        save_final(trainer, Path(cfg.output_dir) / "adapter")
        if trainer.accelerator.is_main_process:
            final = merged_lora(trainer, cfg, Path(cfg.output_dir) / "adapter")
            save_model(final, tok, cfg.output_dir)
        trainer.accelerator.wait_for_everyone()
    else:
        save_final(trainer, cfg.output_dir)
    if vision is not None and trainer.accelerator.is_main_process:
        vision.processor.save_pretrained(cfg.output_dir)  # image processor + chat template
    return GRPOResult(
        output_dir=str(cfg.output_dir),
        run_id=run_id,
        logs=str(log.logs),
        steps=int(trainer.state.global_step),
        rollouts_logged=log.rows,
        reward_first=log.rewards[0] if log.rewards else None,
        reward_last=log.rewards[-1] if log.rewards else None,
        changed_parameters=changed,
        zero_variance_steps=trainer.ddai_zero_variance.count,
        preflight=preflight_status(report),
        search_errors=log.search_errors,
        unscorable=log.unscorable,
        informative_group_share=trainer.ddai_zero_variance.informative_share,
        clip_ratio=step_metrics.mean("clip_ratio"),
    )
