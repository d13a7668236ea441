"""``ddai train grpo``: TRL's ``GRPOTrainer`` over the multi-turn search environment.

TRL runs the optimisation (group advantages, the GRPO/GSPO loss, KL, entropy, checkpoints);
ddai supplies

- ``SearchRollout``: the ``rollout_func``: ``n_agent`` episodes per prompt in lock-step batches,
  returning prompt/completion ids, sampling log-probs and ``env_mask`` (1 on policy tokens, 0 on
  every observation token), which TRL multiplies into the loss mask (state masking);
- ``DdaiReward``: an async reward function awaiting the streamed generator/judge calls;
- ``DdaiGRPOTrainer``: a thin subclass that hands the rollout the batch's task columns and appends
  every step's rollouts, with TRL's advantages, to the rollout log.
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
from ddai.trainer.data import Task, load_tasks
from ddai.trainer.env import EnvConfig, SearchEnv
from ddai.trainer.logrows import rollout_row
from ddai.trainer.rewards import (
    Judged,
    RewardSpec,
    StreamingScorer,
    compute_reward,
    reward_preset,
)
from ddai.trainer.rollout import (
    HFSampler,
    RolloutConfig,
    Trajectory,
    VLLMServerSampler,
    run_rollouts,
)

# Seed 000's focused-round optimiser: sequence-level ratio (GSPO), clip 3e-4/4e-4, lr 1e-6, no KL,
# no entropy bonus.
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "gspo-ddai": {
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
    config_file: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)


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
        **common.device_defaults(),
    }
    merged = common.merge_layers(
        defaults, train_preset(cfg.preset), file_layer, flags, cfg.overrides
    )
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
    ) -> None:
        self.tok = tokenizer
        self.env = env
        self.rollout = rollout
        self.spec = spec
        self.scorer = scorer
        self.sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        self.pending: dict[str, Trajectory] = {}
        self.futures: dict[str, tuple[Any, int]] = {}
        self.judged: dict[str, Judged] = {}
        self.scores: dict[str, Any] = {}

    def _submit(self, group: list[Trajectory]) -> None:
        if self.scorer is None or not self.spec.needs_judge:
            return
        items = [
            {
                "question": t.task.question,
                "reference": t.task.reference_answer,
                "evidence": t.episode.evidence,
                "skip": self.spec.gate and not t.episode.format_ok,
            }
            for t in group
        ]
        fut = self.scorer.submit(items)
        for i, t in enumerate(group):
            self.futures[t.key] = (fut, i)

    def _sampler(self, trainer: Any, model: Any) -> Any:
        stop = [self.tok.eos_token_id]
        if getattr(trainer, "use_vllm", False):
            client = trainer.vllm_generation.vllm_client
            return VLLMServerSampler(client, stop_ids=stop, **self.sampling)
        return HFSampler(model, self.tok, stop_ids=stop, **self.sampling)

    def run(self, tasks: list[tuple[Task, int, int]], trainer: Any, model: Any) -> list[Trajectory]:
        return run_rollouts(
            tasks,
            sampler=self._sampler(trainer, model),
            tokenizer=self.tok,
            env=self.env,
            config=self.rollout,
            on_group_done=self._submit,
        )

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        from trl.models import unwrap_model_for_generation

        inputs = trainer.ddai_inputs
        G = trainer.num_generations
        if not trainer.model.training:
            G = trainer.num_generations_eval or G
        slots = [(Task.from_row(inp), i // G, i % G) for i, inp in enumerate(inputs)]
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
            trajs = self.run(slots, trainer, model)
        for t in trajs:
            self.pending[t.key] = t
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
    then computes ``compute_reward``. Logs ``ddai/judge``, ``ddai/ndcg``, ``ddai/format_ok`` and
    ``ddai/judge_coverage`` (share of rollouts needing a judge score that got one in time)."""

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
            if judged is not None:
                ro.judged[t.key] = judged
            ro.scores[t.key] = score
            rewards.append(score.reward)
        if log_metric is not None and trajs:
            n = len(trajs)
            log_metric("ddai/ndcg", sum(ro.scores[t.key].ndcg for t in trajs) / n)
            log_metric("ddai/format_ok", sum(t.episode.format_ok for t in trajs) / n)
            log_metric("ddai/num_turns", sum(len(t.episode.turns) for t in trajs) / n)
            if needed:
                log_metric("ddai/judge_coverage", scored / needed)
                log_metric("ddai/judge", sum(ro.scores[t.key].parts["judge"] for t in trajs) / n)
        return rewards


def _trainer_class() -> type:
    from trl import GRPOTrainer

    class DdaiGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that shows the rollout its batch and logs the scored rollouts."""

        def __init__(
            self, *args, ddai_rollout: SearchRollout, ddai_log: RolloutLog | None, **kwargs
        ):
            super().__init__(*args, rollout_func=ddai_rollout, **kwargs)
            self.ddai_rollout = ddai_rollout
            self.ddai_log = ddai_log
            self.ddai_inputs: list[dict[str, Any]] = []

        def _generate_and_score_completions(self, inputs):
            self.ddai_inputs = inputs
            out = super()._generate_and_score_completions(inputs)
            advantages = out["advantages"].detach().float().cpu().tolist()
            step = int(self.state.global_step) + 1
            rows = []
            for i, (inp, adv) in enumerate(zip(inputs, advantages, strict=True)):
                traj, judged, score = self.ddai_rollout.pop(inp["episode_key"])
                if self.ddai_log is not None:
                    rows.append(
                        rollout_row(
                            traj,
                            run_id=self.ddai_log.run_id,
                            step=step,
                            advantage=adv,
                            sample_idx=i,
                            judged=judged,
                            score=score,
                        )
                    )
            if self.ddai_log is not None:
                self.ddai_log.append(rows)
            return out

    return DdaiGRPOTrainer


@dataclass
class RolloutLog:
    """Appends each step's rollouts to the log store as one run."""

    logs: Path
    run_id: str
    rows: int = 0
    rewards: list[float] = field(default_factory=list)

    def append(self, rows: list[dict[str, Any]]) -> None:
        from ddai.pipelines.store import write_run

        if not rows:
            return
        write_run(self.logs, self.run_id, rows, append=True)
        self.rows += len(rows)
        rs = [r["reward"] for r in rows if r["reward"] is not None]
        if rs:
            self.rewards.append(sum(rs) / len(rs))


def default_backends(cfg: GRPORunConfig, corpus: Any, spec: RewardSpec) -> Backends:
    from ddai.pipelines.backends import get_backend

    search = get_backend("search", cfg.search, corpus=corpus)
    if not spec.needs_judge:
        return Backends(search=search)
    generator = get_backend("generator", cfg.generator, corpus=corpus, call_site="train.grpo")
    judge = get_backend("judge", cfg.judge, call_site="train.grpo")
    return Backends(search=search, generator=generator, judge=judge)


def run_grpo(cfg: GRPORunConfig, backends: Backends | None = None) -> GRPOResult:
    """Train with GRPO; save the final model to ``output_dir``; log rollouts to the store."""
    from datasets import Dataset

    from ddai.pipelines.corpus import Corpus
    from ddai.trainer.modeling import changed_parameters, load_policy, parameter_snapshot
    from ddai.trainer.rollout import token_truncator
    from ddai.trainer.sft import save_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = grpo_args(cfg)
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
    model, tok = load_policy(cfg.model, dtype=cfg.dtype)
    env = SearchEnv(
        backends.search,
        corpus,
        EnvConfig(cfg.max_turns, cfg.search_k, cfg.force_completion, cfg.restrict_to_doc),
        truncate=token_truncator(tok, cfg.obs_max_tokens),
    )
    scorer = StreamingScorer(backends.generator, backends.judge) if spec.needs_judge else None
    rollout = SearchRollout(
        tokenizer=tok,
        env=env,
        rollout=RolloutConfig(cfg.max_turn_tokens, cfg.max_completion_tokens, cfg.obs_max_tokens),
        spec=spec,
        scorer=scorer,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k or 0,
    )
    run_id = cfg.run_id or f"grpo_{time.strftime('%Y%m%d_%H%M%S')}"
    log = RolloutLog(workspace.logs_dir(cfg.logs), run_id)
    _, metrics_file = common.split_report_to(cfg.report_to)
    trainer = _trainer_class()(
        model=model,
        reward_funcs=[DdaiReward(rollout, cfg.reward_timeout)],
        args=args,
        train_dataset=Dataset.from_list([t.to_row() for t in tasks]),
        processing_class=tok,
        callbacks=common.build_callbacks(cfg.output_dir, metrics_file),
        ddai_rollout=rollout,
        ddai_log=log,
    )
    common.finish_trainer_setup(trainer)
    before = parameter_snapshot(trainer.model)
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    finally:
        if scorer is not None:
            scorer.close()
    save_model(trainer.model, tok, cfg.output_dir)
    return GRPOResult(
        output_dir=str(cfg.output_dir),
        run_id=run_id,
        logs=str(log.logs),
        steps=int(trainer.state.global_step),
        rollouts_logged=log.rows,
        reward_first=log.rewards[0] if log.rewards else None,
        reward_last=log.rewards[-1] if log.rewards else None,
        changed_parameters=len(changed_parameters(before, trainer.model)),
    )
