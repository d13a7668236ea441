"""CLI: ``ddai train value``, ``ddai train ppo`` (added to the ``train`` group) and
``ddai value score``."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, LogsOpt, RunsOpt, ThresholdOpt, check_run_ids, fail, summary
from ddai.cli.train import (
    AccelerateConfigOpt,
    BiasOpt,
    ForceCompletionOpt,
    GateOpt,
    LaunchOpt,
    LoraAlphaOpt,
    LoraOpt,
    LoraROpt,
    LoraTargetOpt,
    MaxTurnsOpt,
    MaxTurnTokensOpt,
    PreflightPromptsOpt,
    RestrictToDocOpt,
    RewardOpt,
    SearchKOpt,
    SkipPreflightOpt,
    WFormatOpt,
    WJudgeOpt,
    WNdcgOpt,
    maybe_relaunch,
)

OutOpt = Annotated[
    Path, typer.Option("--out", help="Output folder: the checkpoint and metrics.jsonl.")
]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="Weight dtype: float32 (default; a GPU still computes in bf16 autocast), bfloat16, "
        "float16 or auto. `train grpo` / `train ppo` refuse half-precision weights that --lr is "
        "too small to change (pure bf16 at lr 1e-6); add --lora to train a float32 adapter.",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (sampling, split, head init).")]
PromptsOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Prompt set (verl RL parquet) to rebuild each rollout's prompt exactly. Default: the "
        "bundled Searcher system prompt and the logged question.",
    ),
]
SystemOpt = Annotated[
    Path | None,
    typer.Option(
        "--system-prompt",
        help="Text file of the Searcher system prompt the policy saw (without --data). Default: "
        "the bundled DDAI prompt.",
    ),
]
MaxLenOpt = Annotated[
    int,
    typer.Option(
        "--max-length", help="Tokens per rollout (prompt + completion); longer ones are cut."
    ),
]
ObsOpt = Annotated[
    int,
    typer.Option("--obs-max-tokens", help="Observation text budget in tokens (as in training)."),
]


def _floats(text: str | None, flag: str) -> list[float]:
    if not text:
        return []
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise fail(
            f"{flag} {text!r}: expected comma-separated numbers, e.g. {flag} 0.25,0.75"
        ) from None


def _run(fn: Any, cfg: Any) -> Any:
    """Call the work function; bad input (settings, files) exits 2 with its message."""
    try:
        return fn(cfg)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        raise fail(str(e)) from e


def _group(app: typer.Typer, name: str, help_text: str) -> typer.Typer:
    """The sub-app ``name`` of ``app`` (registered by its own area), else a new one."""
    for info in app.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(group, name=name)
    return group


def train_value_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Causal LM folder or hub id (a fresh head on its trunk), or a value checkpoint to continue.",
        ),
    ],
    out: OutOpt,
    logs: LogsOpt = None,
    run: RunsOpt = None,
    data: PromptsOpt = None,
    system_prompt: SystemOpt = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head",
            help="Value head: linear (hidden → 1) or mlp (hidden → 512 → 256 → 1, dropout). Default: linear, or the checkpoint's.",
        ),
    ] = None,
    unfreeze: Annotated[
        int,
        typer.Option(
            "--unfreeze",
            help="Top trunk layers that train; 0: the head alone, on detached hidden states.",
        ),
    ] = 2,
    dropout: Annotated[float, typer.Option("--dropout", help="Dropout of the mlp head.")] = 0.1,
    trunk_lr: Annotated[
        float, typer.Option("--trunk-lr", help="Learning rate of the unfrozen trunk layers.")
    ] = 1e-5,
    head_lr: Annotated[float, typer.Option("--head-lr", help="Learning rate of the head.")] = 1e-4,
    weight_decay: Annotated[
        float, typer.Option("--weight-decay", help="AdamW weight decay.")
    ] = 0.0,
    pairwise_coef: Annotated[
        float,
        typer.Option(
            "--pairwise-coef", help="Weight of the pairwise ranking loss (0: MC targets alone)."
        ),
    ] = 1.0,
    mc_coef: Annotated[
        float, typer.Option("--mc-coef", help="Weight of the Monte-Carlo tokenwise MSE.")
    ] = 0.5,
    target: Annotated[
        str, typer.Option("--target", help="MC target: success (1/0) or the logged reward.")
    ] = "success",
    success_threshold: ThresholdOpt = 1.0,
    max_pairs: Annotated[
        int,
        typer.Option(
            "--max-pairs-per-problem", help="Most success/failure pairs drawn per prompt."
        ),
    ] = 25,
    bin_edges: Annotated[
        str | None,
        typer.Option(
            "--bin-edges",
            help="Success-rate bin edges for difficulty weighting, e.g. 0.25,0.75 (default: uniform pairs).",
        ),
    ] = None,
    bin_weights: Annotated[
        str | None,
        typer.Option(
            "--bin-weights", help="Share of sampled pairs per bin, one per bin, e.g. 0.4,0.3,0.3."
        ),
    ] = None,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", help="Share of prompts held out for evaluation.")
    ] = 0.2,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Pairs per step (rollouts with --pairwise-coef 0).")
    ] = 8,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Optimizer steps.")] = 200,
    eval_steps: Annotated[
        int, typer.Option("--eval-steps", help="Evaluate the held-out prompts every N steps.")
    ] = 50,
    max_length: MaxLenOpt = 2048,
    obs_max_tokens: ObsOpt = 256,
    grad_accum: Annotated[
        int,
        typer.Option(
            "--grad-accum",
            help="Micro-batches of --batch-size pairs accumulated per optimizer step.",
        ),
    ] = 1,
    grad_clip: Annotated[
        float, typer.Option("--grad-clip", help="Max gradient norm (0: off).")
    ] = 1.0,
    dtype: DtypeOpt = "float32",
    seed: SeedOpt = 0,
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train a value head on terminal outcomes from the rollout log: pairwise ranking + MC MSE."""
    maybe_relaunch(launch, accelerate_config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.train import ValueTrainConfig, train_value

    cfg = ValueTrainConfig(
        model=model,
        output_dir=out,
        logs=logs,
        runs=run,
        data=data,
        system_prompt=system_prompt,
        head=head,
        unfreeze=unfreeze,
        dropout=dropout,
        trunk_lr=trunk_lr,
        head_lr=head_lr,
        weight_decay=weight_decay,
        pairwise_coef=pairwise_coef,
        mc_coef=mc_coef,
        target=target,
        success_threshold=success_threshold,
        max_pairs_per_problem=max_pairs,
        bin_edges=_floats(bin_edges, "--bin-edges"),
        bin_weights=_floats(bin_weights, "--bin-weights"),
        val_fraction=val_fraction,
        batch_size=batch_size,
        max_steps=max_steps,
        eval_steps=eval_steps,
        max_length=max_length,
        obs_max_tokens=obs_max_tokens,
        grad_clip=grad_clip,
        grad_accum=grad_accum,
        dtype=dtype,
        seed=seed,
    )
    result = asdict(_run(train_value, cfg))
    flat = {k: v for k, v in result.items() if k not in ("eval_before", "eval_after")}
    flat.update({f"before {k}": v for k, v in result["eval_before"].items()})
    flat.update({f"after {k}": v for k, v in result["eval_after"].items()})
    summary("ddai train value", flat, as_json=as_json)


def value_score_command(
    checkpoint: Annotated[
        Path,
        typer.Option("--checkpoint", help="A value checkpoint (the --out of ddai train value)."),
    ],
    logs: LogsOpt = None,
    run: RunsOpt = None,
    out_run: Annotated[
        str | None,
        typer.Option(
            "--out-run",
            callback=check_run_ids,
            help="Write the scored rollouts as this new run (one --run only). Default: a new version of each run's partition.",
        ),
    ] = None,
    data: PromptsOpt = None,
    system_prompt: SystemOpt = None,
    success_threshold: ThresholdOpt = 1.0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Rollouts per forward pass.")
    ] = 16,
    max_length: MaxLenOpt = 2048,
    obs_max_tokens: ObsOpt = 256,
    dtype: DtypeOpt = "float32",
    as_json: JsonOpt = False,
) -> None:
    """Write per-turn value estimates into the rollout log (turns[].value)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.value.score import ValueScoreConfig, score_runs

    if not checkpoint.is_dir():
        raise fail(
            f"--checkpoint {checkpoint} not found; train one with `ddai train value --out DIR`"
        )
    cfg = ValueScoreConfig(
        checkpoint=checkpoint,
        logs=logs,
        runs=run,
        out_run=out_run,
        data=data,
        system_prompt=system_prompt,
        success_threshold=success_threshold,
        batch_size=batch_size,
        max_length=max_length,
        obs_max_tokens=obs_max_tokens,
        dtype=dtype,
    )
    summary("ddai value score", asdict(_run(score_runs, cfg)), as_json=as_json)


def train_ppo_command(
    model: Annotated[
        str, typer.Option("--model", help="Starting policy: a local folder or a hub id.")
    ],
    data: Annotated[Path, typer.Option("--data", help="Prompts in verl's RL parquet shape.")],
    corpus: Annotated[
        Path, typer.Option("--corpus", help="pages.parquet (or its folder) to search and crop.")
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Output folder: the policy, critic/ and metrics.jsonl.")
    ],
    critic: Annotated[
        str | None,
        typer.Option(
            "--critic",
            help="Value checkpoint to start the critic from (ddai train value). Default: a fresh head on the policy's trunk.",
        ),
    ] = None,
    critic_head: Annotated[
        str, typer.Option("--critic-head", help="Head of a fresh critic: linear or mlp.")
    ] = "linear",
    critic_unfreeze: Annotated[
        int | None,
        typer.Option(
            "--critic-unfreeze",
            help="Top critic trunk layers that train. Default: the checkpoint's, or 2.",
        ),
    ] = None,
    logs: LogsOpt = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            callback=check_run_ids,
            help="Run id of the rollout log. Default: ppo_<timestamp>.",
        ),
    ] = None,
    reward: RewardOpt = "curriculum",
    w_judge: WJudgeOpt = None,
    w_ndcg: WNdcgOpt = None,
    w_format: WFormatOpt = None,
    bias: BiasOpt = None,
    gate: GateOpt = None,
    n_agent: Annotated[int, typer.Option("--n-agent", help="Rollouts per prompt.")] = 1,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Rollouts per step (a multiple of --n-agent).")
    ] = 8,
    mini_batch_size: Annotated[
        int | None,
        typer.Option(
            "--mini-batch-size", help="Rollouts per optimizer step. Default: the whole batch."
        ),
    ] = None,
    ppo_epochs: Annotated[
        int,
        typer.Option("--ppo-epochs", help="Passes over each batch on its stored old log-probs."),
    ] = 4,
    max_steps: Annotated[
        int, typer.Option("--max-steps", help="PPO steps (rollout batches).")
    ] = 10,
    lr: Annotated[float, typer.Option("--lr", help="Policy learning rate.")] = 1e-6,
    critic_lr: Annotated[
        float, typer.Option("--critic-lr", help="Critic head learning rate.")
    ] = 1e-4,
    critic_trunk_lr: Annotated[
        float,
        typer.Option(
            "--critic-trunk-lr", help="Learning rate of the critic's unfrozen trunk layers."
        ),
    ] = 1e-5,
    clip_low: Annotated[
        float, typer.Option("--clip-low", help="Lower clip ε (ratio ≥ 1 − ε).")
    ] = 0.2,
    clip_high: Annotated[
        float, typer.Option("--clip-high", help="Upper clip ε (ratio ≤ 1 + ε).")
    ] = 0.2,
    vf_clip: Annotated[
        float,
        typer.Option(
            "--vf-clip",
            help="Value clip range around the rollout-time values; 0: unclipped ½·(V − R)², "
            "which is seed 003's critic loss (critic weight 0.5).",
        ),
    ] = 0.2,
    kl: Annotated[
        float,
        typer.Option(
            "--kl",
            help="KL coefficient β of the per-token penalty against the frozen reference (0: off).",
        ),
    ] = 0.05,
    kl_estimator: Annotated[
        str,
        typer.Option(
            "--kl-estimator",
            help="KL estimator: k1 (log-ratio), k2 (½·log-ratio²) or k3 (GRPO's low-variance one).",
        ),
    ] = "k1",
    kl_mode: Annotated[
        str,
        typer.Option(
            "--kl-mode",
            help="Where the KL goes: reward (−β·KL on each token's reward) or loss (+β·KL added to "
            "the policy loss; use k2 or k3 there, k1's gradient is 0 in expectation).",
        ),
    ] = "reward",
    reward_norm: Annotated[
        str,
        typer.Option(
            "--reward-norm",
            help="Normalize each batch's outcome rewards: none, center (minus the mean), scale "
            "(divide by the std, sign kept) or whiten (mean 0, std 1).",
        ),
    ] = "none",
    entropy_coef: Annotated[
        float,
        typer.Option(
            "--entropy-coef", help="Entropy bonus c_H: the policy loss subtracts c_H·mean entropy."
        ),
    ] = 0.0,
    gamma: Annotated[float, typer.Option("--gamma", help="GAE discount γ per policy token.")] = 1.0,
    lam: Annotated[float, typer.Option("--lam", help="GAE λ.")] = 0.95,
    whiten: Annotated[
        bool,
        typer.Option(
            "--whiten/--no-whiten", help="Whiten advantages over the batch's policy tokens."
        ),
    ] = True,
    temperature: Annotated[
        float, typer.Option("--temperature", help="Sampling temperature.")
    ] = 1.0,
    max_turns: MaxTurnsOpt = 7,
    search_k: SearchKOpt = 5,
    force_completion: ForceCompletionOpt = True,
    restrict_to_doc: RestrictToDocOpt = False,
    max_turn_tokens: MaxTurnTokensOpt = 256,
    max_completion_tokens: Annotated[
        int, typer.Option("--max-completion-tokens", help="Token budget of a whole rollout.")
    ] = 1024,
    obs_max_tokens: ObsOpt = 256,
    search: Annotated[
        str | None,
        typer.Option(
            "--search",
            help="Search backend name from ddai.toml (default: local BM25 over --corpus); a "
            "`search-http` backend queries a retrieval service.",
        ),
    ] = None,
    generator: Annotated[
        str | None, typer.Option("--generator", help="Frozen generator backend name.")
    ] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="Judge backend name.")] = None,
    reward_timeout: Annotated[
        float,
        typer.Option(
            "--reward-timeout",
            help="Seconds to wait for streamed judge results; late groups score 0.",
        ),
    ] = 90.0,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Use only the first N prompts.")
    ] = None,
    grad_accum: Annotated[
        int,
        typer.Option(
            "--grad-accum",
            help="Micro-batches each mini-batch is split into and accumulated (less memory).",
        ),
    ] = 1,
    grad_clip: Annotated[
        float, typer.Option("--grad-clip", help="Max gradient norm of each model (0: off).")
    ] = 1.0,
    dtype: DtypeOpt = "float32",
    lora: LoraOpt = False,
    lora_r: LoraROpt = 16,
    lora_alpha: LoraAlphaOpt = 32,
    lora_target: LoraTargetOpt = "all-linear",
    seed: SeedOpt = 0,
    skip_preflight: SkipPreflightOpt = False,
    preflight_prompts: PreflightPromptsOpt = 2,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue from the last checkpoint-N in --out: steps N+1..--max-steps, same run id.",
        ),
    ] = False,
    save_steps: Annotated[
        int,
        typer.Option(
            "--save-steps",
            help="Write a resumable checkpoint-N every this many steps (0: after the last step only).",
        ),
    ] = 0,
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """PPO over the multi-turn search environment, with a value head as critic and GAE."""
    maybe_relaunch(launch, accelerate_config)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.ppo.train import PPORunConfig, run_ppo

    for name, path in (("--data", data), ("--corpus", corpus)):
        if not path.exists():
            raise fail(f"{name} {path} not found; make fixture data with `ddai fixtures make OUT`")
    if vf_clip < 0:
        raise fail(f"--vf-clip must be >= 0 (0: unclipped), got {vf_clip}")
    cfg = PPORunConfig(
        model=model,
        data=data,
        corpus=corpus,
        output_dir=out,
        critic=critic,
        critic_head=critic_head,
        critic_unfreeze=critic_unfreeze,
        run_id=run_id,
        logs=logs,
        reward=reward,
        w_judge=w_judge,
        w_ndcg=w_ndcg,
        w_format=w_format,
        bias=bias,
        gate=gate,
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
        vf_clip=vf_clip or None,
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
        max_turns=max_turns,
        search_k=search_k,
        force_completion=force_completion,
        restrict_to_doc=restrict_to_doc,
        max_turn_tokens=max_turn_tokens,
        max_completion_tokens=max_completion_tokens,
        obs_max_tokens=obs_max_tokens,
        search=search,
        generator=generator,
        judge=judge,
        reward_timeout=reward_timeout,
        limit=limit,
        grad_clip=grad_clip,
        grad_accum=grad_accum,
        dtype=dtype,
        lora=lora,
        lora_r=lora_r,
        lora_alpha=lora_alpha,
        lora_target=lora_target,
        seed=seed,
        skip_preflight=skip_preflight,
        preflight_prompts=preflight_prompts,
    )
    summary("ddai train ppo", asdict(_run(run_ppo, cfg)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train value``, ``train value-sft`` and ``train ppo`` to the ``train`` group and the
    ``value`` group."""
    train_app = _group(
        app, "train", "Train the Searcher: SFT, then GRPO over the search environment."
    )
    train_app.command("value")(train_value_command)
    train_app.command("ppo")(train_ppo_command)
    from ddai.cli.value_sft import train_value_sft_command  # imports this module's options

    train_app.command("value-sft")(train_value_sft_command)
    value_app = typer.Typer(
        help="Value heads over the rollout log: per-turn value estimates.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    value_app.command("score")(value_score_command)
    app.add_typer(value_app, name="value")
