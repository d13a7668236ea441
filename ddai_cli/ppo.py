"""CLI: ``ddai train ppo`` (added to the ``train`` group): PPO over the multi-turn search
environment with a value head as critic (``ddai.trainer.ppo``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, check_run_ids, summary
from ddai.cli.options import (
    AccelerateConfigOpt,
    CorpusOpt,
    DtypeOpt,
    LaunchOpt,
    LimitOpt,
    LoraAlphaOpt,
    LoraOpt,
    LoraROpt,
    LoraTargetOpt,
    PreflightPromptsOpt,
    PromptDataOpt,
    SkipPreflightOpt,
    ValueSeedOpt,
    default_of,
    require_inputs,
    with_groups,
)
from ddai.cli.running import TRAIN_HELP, maybe_relaunch, run_or_fail, sub_app
from ddai.trainer.ppo.config import PPORunConfig
from ddai.trainer.search.config import EpisodeBackends, EpisodeConfig, RewardOverrides


@with_groups()
def train_ppo_command(
    model: Annotated[
        str, typer.Option("--model", help="Starting policy: a local folder or a hub id.")
    ],
    data: PromptDataOpt,
    corpus: CorpusOpt,
    out: Annotated[
        Path,
        typer.Option("--out-dir", help="Output folder: the policy, critic/ and metrics.jsonl."),
    ],
    critic: Annotated[
        str | None,
        typer.Option(
            "--critic",
            help="Value checkpoint to start the critic from (ddai train value). Default: a fresh head on the policy's trunk.",
        ),
    ] = default_of(PPORunConfig, "critic"),
    critic_head: Annotated[
        str, typer.Option("--critic-head", help="Head of a fresh critic: linear or mlp.")
    ] = default_of(PPORunConfig, "critic_head"),
    critic_unfreeze: Annotated[
        int | None,
        typer.Option(
            "--critic-unfreeze",
            help="Top critic trunk layers that train. Default: the checkpoint's, or 2.",
        ),
    ] = default_of(PPORunConfig, "critic_unfreeze"),
    logs: LogsOpt = default_of(PPORunConfig, "logs"),
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            callback=check_run_ids,
            help="Run id of the rollout log. Default: ppo_<timestamp>.",
        ),
    ] = default_of(PPORunConfig, "run_id"),
    n_agent: Annotated[int, typer.Option("--n-agent", help="Rollouts per prompt.")] = default_of(
        PPORunConfig, "n_agent"
    ),
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Rollouts per step (a multiple of --n-agent).")
    ] = default_of(PPORunConfig, "batch_size"),
    mini_batch_size: Annotated[
        int | None,
        typer.Option(
            "--mini-batch-size", help="Rollouts per optimizer step. Default: the whole batch."
        ),
    ] = default_of(PPORunConfig, "mini_batch_size"),
    ppo_epochs: Annotated[
        int,
        typer.Option("--ppo-epochs", help="Passes over each batch on its stored old log-probs."),
    ] = default_of(PPORunConfig, "ppo_epochs"),
    max_steps: Annotated[
        int, typer.Option("--max-steps", help="PPO steps (rollout batches).")
    ] = default_of(PPORunConfig, "max_steps"),
    lr: Annotated[float, typer.Option("--lr", help="Policy learning rate.")] = default_of(
        PPORunConfig, "learning_rate"
    ),
    critic_lr: Annotated[
        float, typer.Option("--critic-lr", help="Critic head learning rate.")
    ] = default_of(PPORunConfig, "critic_lr"),
    critic_trunk_lr: Annotated[
        float,
        typer.Option(
            "--critic-trunk-lr", help="Learning rate of the critic's unfrozen trunk layers."
        ),
    ] = default_of(PPORunConfig, "critic_trunk_lr"),
    clip_low: Annotated[
        float, typer.Option("--clip-low", help="Lower clip ε (ratio ≥ 1 − ε).")
    ] = default_of(PPORunConfig, "clip_low"),
    clip_high: Annotated[
        float, typer.Option("--clip-high", help="Upper clip ε (ratio ≤ 1 + ε).")
    ] = default_of(PPORunConfig, "clip_high"),
    vf_clip: Annotated[
        float,
        typer.Option(
            "--vf-clip",
            help="Value clip range around the rollout-time values; 0: unclipped ½·(V − R)², "
            "which is seed 003's critic loss (critic weight 0.5).",
        ),
    ] = default_of(PPORunConfig, "vf_clip"),
    kl: Annotated[
        float,
        typer.Option(
            "--kl",
            help="KL coefficient β of the per-token penalty against the frozen reference (0: off).",
        ),
    ] = default_of(PPORunConfig, "kl_coef"),
    kl_estimator: Annotated[
        str,
        typer.Option(
            "--kl-estimator",
            help="KL estimator: k1 (log-ratio), k2 (½·log-ratio²) or k3 (GRPO's low-variance one).",
        ),
    ] = default_of(PPORunConfig, "kl_estimator"),
    kl_mode: Annotated[
        str,
        typer.Option(
            "--kl-mode",
            help="Where the KL goes: reward (−β·KL on each token's reward) or loss (+β·KL added to "
            "the policy loss; use k2 or k3 there, k1's gradient is 0 in expectation).",
        ),
    ] = default_of(PPORunConfig, "kl_mode"),
    reward_norm: Annotated[
        str,
        typer.Option(
            "--reward-norm",
            help="Normalize each batch's outcome rewards: none, center (minus the mean), scale "
            "(divide by the std, sign kept) or whiten (mean 0, std 1).",
        ),
    ] = default_of(PPORunConfig, "reward_norm"),
    entropy_coef: Annotated[
        float,
        typer.Option(
            "--entropy-coef", help="Entropy bonus c_H: the policy loss subtracts c_H·mean entropy."
        ),
    ] = default_of(PPORunConfig, "entropy_coef"),
    gamma: Annotated[
        float, typer.Option("--gamma", help="GAE discount γ per policy token.")
    ] = default_of(PPORunConfig, "gamma"),
    lam: Annotated[float, typer.Option("--lam", help="GAE λ.")] = default_of(PPORunConfig, "lam"),
    whiten: Annotated[
        bool,
        typer.Option(
            "--whiten/--no-whiten", help="Whiten advantages over the batch's policy tokens."
        ),
    ] = default_of(PPORunConfig, "whiten_advantages"),
    temperature: Annotated[
        float, typer.Option("--temperature", help="Sampling temperature.")
    ] = default_of(PPORunConfig, "temperature"),
    limit: LimitOpt = default_of(PPORunConfig, "limit"),
    grad_accum: Annotated[
        int,
        typer.Option(
            "--grad-accum",
            help="Micro-batches each mini-batch is split into and accumulated (less memory).",
        ),
    ] = default_of(PPORunConfig, "grad_accum"),
    grad_clip: Annotated[
        float, typer.Option("--grad-clip", help="Max gradient norm of each model (0: off).")
    ] = default_of(PPORunConfig, "grad_clip"),
    dtype: DtypeOpt = default_of(PPORunConfig, "dtype"),
    lora: LoraOpt = default_of(PPORunConfig, "lora"),
    lora_r: LoraROpt = default_of(PPORunConfig, "lora_r"),
    lora_alpha: LoraAlphaOpt = default_of(PPORunConfig, "lora_alpha"),
    lora_target: LoraTargetOpt = default_of(PPORunConfig, "lora_target"),
    seed: ValueSeedOpt = default_of(PPORunConfig, "seed"),
    skip_preflight: SkipPreflightOpt = default_of(PPORunConfig, "skip_preflight"),
    preflight_prompts: PreflightPromptsOpt = default_of(PPORunConfig, "preflight_prompts"),
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue from the last checkpoint-N in --out-dir: steps N+1..--max-steps, same run id.",
        ),
    ] = default_of(PPORunConfig, "resume"),
    save_steps: Annotated[
        int,
        typer.Option(
            "--save-steps",
            help="Write a resumable checkpoint-N every this many steps (0: after the last step only).",
        ),
    ] = default_of(PPORunConfig, "save_steps"),
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    progress: ProgressOpt = default_of(PPORunConfig, "progress"),
    as_json: JsonOpt = False,
    *,
    rewards: RewardOverrides,
    episode: EpisodeConfig,
    backends: EpisodeBackends,
) -> None:
    """PPO over the multi-turn search environment, with a value head as critic and GAE."""
    maybe_relaunch(launch, accelerate_config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.ppo.train import run_ppo

    require_inputs(data, corpus)
    cfg = PPORunConfig(
        model=model,
        data=data,
        corpus=corpus,
        episode=episode,
        rewards=rewards,
        backends=backends,
        output_dir=out,
        critic=critic,
        critic_head=critic_head,
        critic_unfreeze=critic_unfreeze,
        run_id=run_id,
        logs=logs,
        n_agent=n_agent,
        batch_size=batch_size,
        mini_batch_size=mini_batch_size,
        ppo_epochs=ppo_epochs,
        max_steps=max_steps,
        learning_rate=lr,
        critic_lr=critic_lr,
        critic_trunk_lr=critic_trunk_lr,
        clip_low=clip_low,
        clip_high=clip_high,
        vf_clip=vf_clip,
        kl_coef=kl,
        kl_estimator=kl_estimator,
        kl_mode=kl_mode,
        reward_norm=reward_norm,
        entropy_coef=entropy_coef,
        resume=resume,
        save_steps=save_steps,
        gamma=gamma,
        lam=lam,
        whiten_advantages=whiten,
        temperature=temperature,
        limit=limit,
        grad_clip=grad_clip,
        grad_accum=grad_accum,
        dtype=dtype,
        lora=lora,
        lora_r=lora_r,
        lora_alpha=lora_alpha,
        lora_target=lora_target,
        seed=seed,
        progress=progress and not as_json,
        skip_preflight=skip_preflight,
        preflight_prompts=preflight_prompts,
    )
    summary("ddai train ppo", asdict(run_or_fail(run_ppo, cfg)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train ppo`` to the ``train`` group."""
    sub_app(app, "train", TRAIN_HELP).command("ppo")(train_ppo_command)
