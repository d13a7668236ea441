"""``ddai train grpo``: TRL's ``GRPOTrainer`` over the multi-turn search environment.

TRL runs the optimisation (group advantages, the GRPO/GSPO loss, KL, entropy, checkpoints);
ddai supplies

- ``SearchRollout`` (``ddai.trainer.episode.episodes``): the ``rollout_func``: ``n_agent``
  episodes per prompt in lock-step batches, returning prompt/completion ids, sampling log-probs
  and ``env_mask`` (1 on policy tokens, 0 on every observation token), which TRL multiplies into
  the loss mask (state masking);
- ``DdaiReward`` (``ddai.trainer.episode.scoring``): an async reward function awaiting the
  streamed generator/judge calls;
- ``DdaiGRPOTrainer`` (``ddai.trainer.trl_compat``): a thin subclass that hands the rollout the
  batch's task columns and appends every step's rollouts, with TRL's advantages, to the rollout
  log. With image observations it also feeds the images each rollout was shown
  (``pixel_values``, ``image_grid_thw``) into every log-prob forward pass (old, reference and
  loss), which TRL's ``rollout_func`` path does not.

This module wires them together (``run_grpo``); the settings are ``grpo.config``'s.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from ddai.pipelines.store import workspace
from ddai.trainer import common
from ddai.trainer.episode import run_rules
from ddai.trainer.episode.episodes import (
    Backends,
    SearchRollout,
    check_reward_backends,
    default_backends,
    rollout_config,
    search_env,
    streaming_scorer,
)
from ddai.trainer.episode.logrows import RolloutLog
from ddai.trainer.episode.pages import observation_policy, page_images
from ddai.trainer.episode.preflight import check_episodes, write_run_config
from ddai.trainer.episode.preflight_steps import (
    check_policy_template,
    preflight_slots,
    preflight_status,
    run_static_preflight,
    sampled_episodes,
)
from ddai.trainer.episode.scoring import DdaiReward
from ddai.trainer.episode.tasks import load_tasks
from ddai.trainer.grpo.config import GRPOResult, GRPORunConfig, grpo_args
from ddai.trainer.runtime import dist
from ddai.trainer.runtime.clip_stats import no_clip_fields
from ddai.trainer.trl_compat import grpo_trainer_class


def commit_each_step(log: RolloutLog) -> Any:
    """A ``TrainerCallback`` that commits each optimizer step's rollouts when the step ends (the
    trainer queues them in ``log`` as they are scored, possibly over several generations)."""
    from transformers import TrainerCallback

    class CommitEachStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            log.flush()

    return CommitEachStep()


def run_grpo(cfg: GRPORunConfig, backends: Backends | None = None) -> GRPOResult:
    """Train with GRPO; save the final model to ``output_dir``; log rollouts to the store."""
    from datasets import Dataset

    from ddai.pipelines.pages.corpus import Corpus
    from ddai.trainer.lora_merge import full_model
    from ddai.trainer.modeling import (
        changed_parameters,
        check_update_precision,
        float32_adapter,
        lora_config,
        parameter_snapshot,
    )
    from ddai.trainer.runtime.metrics_file import build_callbacks
    from ddai.trainer.runtime.save import save_final, save_lora_final
    from ddai.trainer.runtime.train_metrics import TrainMetricsLog

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg.check()
    common.hf_progress(cfg.progress)
    args = grpo_args(cfg)
    dist.allow_fsdp_on_cpu(args)
    dist.end_group_at_exit()
    resume_from = common.resume_checkpoint(cfg.output_dir, cfg.resume)
    rules = run_rules.episode_rules(cfg, run_rules.sampling_rules(args))
    note = (
        run_rules.check_resume(cfg.output_dir, rules, "ddai train grpo")
        if resume_from is not None
        else run_rules.check_append(
            workspace.logs_dir(cfg.logs), cfg.run_id, rules, "ddai train grpo"
        )
    )
    if note is not None:
        warnings.warn(f"ddai train grpo: {note}", stacklevel=2)
    spec = cfg.rewards.reward_spec()
    tasks = load_tasks(cfg.data, cfg.limit)
    if not tasks:
        raise common.TrainConfigError(f"--data {cfg.data}: no prompts")
    corpus = Corpus.load(cfg.corpus)
    backends = backends or default_backends(cfg.backends, corpus, spec)
    check_reward_backends(backends, spec)
    image_of = page_images(cfg, corpus)

    report = run_static_preflight(cfg, tasks, corpus, backends, spec, image_of is not None)
    model, tok, vision, box_convention = observation_policy(cfg, image_of)
    peft_config = None
    if cfg.lora:
        peft_config = lora_config(
            r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target=cfg.lora_target
        )
    else:
        check_update_precision(model, args.learning_rate)
    check_policy_template(report, tok, vision, tasks[0].messages)
    env = search_env(
        cfg, backends.search, corpus, tok, image_of=image_of, box_convention=box_convention
    )
    scorer = streaming_scorer(cfg, backends, spec)
    rollout = SearchRollout(
        tokenizer=tok,
        env=env,
        rollout=rollout_config(cfg.episode),
        spec=spec,
        scorer=scorer,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k or 0,
        min_p=args.min_p or 0.0,
        repetition_penalty=args.repetition_penalty,
        vision=vision,
    )
    run_id = cfg.run_id or f"grpo_{time.strftime('%Y%m%d_%H%M%S')}"
    log = RolloutLog(workspace.logs_dir(cfg.logs), run_id, record={run_rules.RULES_KEY: rules})
    _, metrics_file = common.split_report_to(cfg.report_to)
    step_metrics = TrainMetricsLog(log.logs, run_id, writer=log)
    trainer = grpo_trainer_class()(
        model=model,
        reward_funcs=[DdaiReward(rollout.store, cfg.backends.reward_timeout)],
        args=args,
        train_dataset=Dataset.from_list([t.to_row() for t in tasks]),
        processing_class=tok,
        peft_config=peft_config,
        callbacks=[
            *build_callbacks(cfg.output_dir, metrics_file, progress=cfg.progress),
            step_metrics,
            commit_each_step(log),
        ],
        ddai_rollout=rollout,
        ddai_log=log,
    )
    common.finish_trainer_setup(trainer)
    if resume_from is not None and trainer.accelerator.is_main_process:
        # Rows a crashed run logged after its last checkpoint are trained and logged again from
        # it: the earlier ones go first (as PPO's resume does), so no step is in the log twice.
        log.drop_after(common.checkpoint_step(resume_from))
        log.count_kept()  # rollouts_logged: the run's total, its earlier steps included
    if cfg.lora:
        float32_adapter(trainer.model)  # TRL leaves it in the weights' dtype under ZeRO-3
        check_update_precision(trainer.model, args.learning_rate)
    try:
        if not cfg.skip_preflight:
            from ddai.trainer.trl_compat import unwrap_model_for_generation

            slots = preflight_slots(tasks, cfg.preflight_prompts, args.num_generations, cfg.seed)
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as m:
                check_episodes(
                    report,
                    sampled_episodes(rollout, slots, trainer, m, cfg.backends.reward_timeout),
                )
            report.raise_errors()
        if trainer.accelerator.is_main_process:
            write_run_config(
                cfg.output_dir, "train grpo", cfg, report, extra={run_rules.RULES_KEY: rules}
            )
    except BaseException:
        if scorer is not None:
            scorer.close()
        raise
    # Digests, not copies, of the trainable weights (with LoRA: the adapter's only).
    before = parameter_snapshot(trainer.model)
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    finally:
        log.flush()
        if scorer is not None:
            scorer.close()
    changed = len(changed_parameters(before, trainer.model))  # collective under FSDP
    if cfg.lora:
        final = save_lora_final(trainer, cfg, tok)  # merged in float32, checked
    else:
        save_final(trainer, cfg.output_dir)
        final = full_model(cfg.output_dir) if trainer.accelerator.is_main_process else None
    if vision is not None and trainer.accelerator.is_main_process:
        vision.processor.save_pretrained(cfg.output_dir)  # image processor + chat template
    return GRPOResult(
        output_dir=str(cfg.output_dir),
        steps=int(trainer.state.global_step),
        **log.result_fields(),
        changed_parameters=changed,
        final_model=final.summary() if final else None,
        zero_variance_steps=trainer.ddai_zero_variance.count,
        preflight=preflight_status(report),
        search_errors=log.search_errors,
        unscorable=log.unscorable,
        informative_group_share=trainer.ddai_zero_variance.informative_share,
        clip_ratio=step_metrics.mean("clip_ratio"),
        **(no_clip_fields() if trainer.ddai_clip is None else trainer.ddai_clip.result_fields()),
    )
