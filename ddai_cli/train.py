"""CLI: ``ddai train sft`` and ``ddai train grpo`` (TRL-based)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, LogsOpt, check_run_ids, fail, summary

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model", help="Starting model: a local folder or a hub id (loaded with from_pretrained)."
    ),
]
OutOpt = Annotated[
    Path, typer.Option("--out", help="Output folder: checkpoints, metrics and the final model.")
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", help="TOML/YAML file of TRL config knobs (flat, or under a [trl] table)."
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Any TRL config knob as KEY=VALUE (JSON values); repeatable; wins over all.",
    ),
]
ReportOpt = Annotated[
    str | None,
    typer.Option(
        "--report-to",
        help="Metric sinks, comma-separated: jsonl (default) or csv file, plus integrations such as "
        "tensorboard; `none` for nothing.",
    ),
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Continue from the last checkpoint in --out.")
]
StepsOpt = Annotated[
    int | None, typer.Option("--max-steps", help="Stop after this many optimizer steps.")
]
LrOpt = Annotated[float | None, typer.Option("--lr", help="Learning rate.")]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="Weight dtype: float32 (default; a GPU still computes in bf16 autocast), bfloat16, "
        "float16 or auto. `train grpo` / `train ppo` refuse half-precision weights that --lr is "
        "too small to change (pure bf16 at lr 1e-6); add --lora to train a float32 adapter.",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed.")]
SaveOpt = Annotated[int | None, typer.Option("--save-steps", help="Checkpoint every N steps.")]
LogStepsOpt = Annotated[
    int | None, typer.Option("--logging-steps", help="Log metrics every N steps.")
]

# LoRA options shared by `ddai train grpo` and `ddai train ppo`.
LoraOpt = Annotated[
    bool,
    typer.Option(
        "--lora",
        help="Train a LoRA adapter (peft, float32) on frozen weights, e.g. a 7B policy in bfloat16 "
        "on one 80 GB GPU; the adapter goes to <out>/adapter, the merged model to <out>.",
    ),
]
LoraROpt = Annotated[int, typer.Option("--lora-r", help="LoRA rank.")]
LoraAlphaOpt = Annotated[int, typer.Option("--lora-alpha", help="LoRA alpha.")]
LoraTargetOpt = Annotated[
    str, typer.Option("--lora-target", help="LoRA target modules (peft syntax).")
]
RepetitionPenaltyOpt = Annotated[
    float | None,
    typer.Option(
        "--repetition-penalty",
        help="Sampling repetition penalty (default 1: none). Applied explicitly, and the returned "
        "log-probs are of the penalized distribution; the checkpoint's own generation_config "
        "never applies.",
    ),
]

# Reward and episode options shared by `ddai train grpo` and `ddai train ppo`.
RewardOpt = Annotated[
    str,
    typer.Option(
        "--reward",
        help="Reward preset: curriculum (0.8 judge + 0.2 NDCG, gated), ddai-phase1 (0.1 + 0.9 NDCG if format passes) or judge-only.",
    ),
]
WJudgeOpt = Annotated[
    float | None, typer.Option("--w-judge", help="Judge weight (overrides the preset).")
]
WNdcgOpt = Annotated[float | None, typer.Option("--w-ndcg", help="NDCG weight.")]
WFormatOpt = Annotated[float | None, typer.Option("--w-format", help="Format weight.")]
BiasOpt = Annotated[
    float | None, typer.Option("--reward-bias", help="Constant added before the gate.")
]
GateOpt = Annotated[
    bool | None,
    typer.Option("--gate/--no-gate", help="Zero the reward when the format check fails."),
]
MaxTurnsOpt = Annotated[int, typer.Option("--max-turns", help="Turns per episode.")]
SearchKOpt = Annotated[int, typer.Option("--search-k", help="Search results fetched per query.")]
ForceCompletionOpt = Annotated[
    bool, typer.Option(help="Inject DDAI's forced completion at --max-turns.")
]
RestrictToDocOpt = Annotated[bool, typer.Option(help="Search only the question's own document.")]
SkipPreflightOpt = Annotated[
    bool,
    typer.Option(
        "--skip-preflight",
        help="Train without the preflight (golden pages in the corpus and returned by search, chat "
        "template renders the tags, sampled episodes complete and score); recorded in the run's "
        "run_config.json.",
    ),
]
PreflightPromptsOpt = Annotated[
    int,
    typer.Option(
        "--preflight-prompts",
        min=1,
        help="Prompts whose n_agent episodes the preflight samples (4x as many questions are "
        "searched).",
    ),
]
MaxTurnTokensOpt = Annotated[
    int, typer.Option("--max-turn-tokens", help="New tokens per policy turn.")
]
LaunchOpt = Annotated[
    int | None,
    typer.Option(
        "--launch",
        help="Run this command on N processes under `accelerate launch` (GPUs, or gloo on CPU); "
        "--batch-size stays per process, so the global batch is N × --batch-size.",
    ),
]
AccelerateConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--accelerate-config",
        help="accelerate config file for --launch (configs/accelerate/{ddp,zero2,zero3,fsdp}.yaml "
        "or your own). Default: plain data parallel.",
    ),
]


def maybe_relaunch(launch: int | None, accelerate_config: Path | None) -> None:
    """With --launch N, run the same command line under accelerate and exit with its code."""
    if launch is None:
        if accelerate_config is not None:
            raise fail("--accelerate-config needs --launch N")
        return
    import sys

    from ddai.trainer.runtime.launch import relaunch

    try:
        code = relaunch(sys.argv[1:], launch, accelerate_config)
    except (ValueError, FileNotFoundError) as e:
        raise fail(str(e)) from e
    raise typer.Exit(code)


def _summary(title: str, data: dict, *, as_json: bool) -> None:
    """The closing summary, printed by the main process only (one per run under a launcher)."""
    from ddai.trainer.runtime import dist

    if dist.is_main():
        summary(title, data, as_json=as_json)


def _run(fn, cfg):
    """Call the training function; bad input (settings, files, TRL's config checks) exits 2."""
    from ddai.trainer.common import TrainConfigError

    try:
        return fn(cfg)
    except (TrainConfigError, FileNotFoundError, FileExistsError, ValueError) as e:
        raise fail(str(e)) from e


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    train_app = typer.Typer(
        help="Train the Searcher: SFT, then GRPO over the search environment.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )

    @train_app.command("sft")
    def sft(
        model: ModelOpt,
        data: Annotated[
            list[Path],
            typer.Option(
                "--data",
                metavar="FILE",
                help="`ddai distill` output or DDAI train1 file(s) (Parquet/JSONL, a `messages` column); repeatable.",
            ),
        ],
        out: OutOpt,
        epochs: Annotated[float | None, typer.Option("--epochs", help="Training epochs.")] = None,
        max_steps: StepsOpt = None,
        lr: LrOpt = None,
        batch_size: Annotated[
            int | None, typer.Option("--batch-size", help="Conversations per device step.")
        ] = None,
        grad_accum: Annotated[
            int | None, typer.Option("--grad-accum", help="Gradient accumulation steps.")
        ] = None,
        max_length: Annotated[
            int | None,
            typer.Option("--max-length", help="Truncate conversations to this many tokens."),
        ] = None,
        assistant_only_loss: Annotated[
            bool, typer.Option(help="Loss on the Searcher's turns only (observations masked).")
        ] = True,
        lora: Annotated[
            bool,
            typer.Option("--lora", help="Train a LoRA adapter (peft); the merged model is saved."),
        ] = False,
        lora_r: Annotated[int, typer.Option("--lora-r", help="LoRA rank.")] = 16,
        lora_alpha: Annotated[int, typer.Option("--lora-alpha", help="LoRA alpha.")] = 32,
        lora_target: Annotated[
            str, typer.Option("--lora-target", help="LoRA target modules (peft syntax).")
        ] = "all-linear",
        image_root: Annotated[
            Path | None,
            typer.Option(
                "--image-root",
                help="Folder of the page images the conversations show, found by file name "
                "(VLM models, i.e. a model folder with a processor: images stay images).",
            ),
        ] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
        report_to: ReportOpt = None,
        save_steps: SaveOpt = None,
        logging_steps: LogStepsOpt = None,
        resume: ResumeOpt = False,
        dtype: DtypeOpt = "float32",
        seed: SeedOpt = 0,
        launch: LaunchOpt = None,
        accelerate_config: AccelerateConfigOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Supervised fine-tuning with TRL's SFTTrainer on Searcher conversations."""
        maybe_relaunch(launch, accelerate_config)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import TrainConfigError, parse_set
        from ddai.trainer.sft.train import SFTRunConfig, run_sft

        try:
            overrides = parse_set(set_)
        except TrainConfigError as e:
            raise fail(str(e)) from e
        cfg = SFTRunConfig(
            model=model,
            data=data,
            output_dir=out,
            epochs=epochs,
            max_steps=max_steps,
            learning_rate=lr,
            batch_size=batch_size,
            grad_accum=grad_accum,
            max_length=max_length,
            assistant_only_loss=assistant_only_loss,
            lora=lora,
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            lora_target=lora_target,
            image_root=image_root,
            seed=seed,
            save_steps=save_steps,
            logging_steps=logging_steps,
            report_to=report_to,
            resume=resume,
            dtype=dtype,
            config_file=config,
            overrides=overrides,
        )
        result = _run(run_sft, cfg)
        _summary("ddai train sft", asdict(result), as_json=as_json)

    @train_app.command("grpo")
    def grpo(
        model: ModelOpt,
        data: Annotated[
            Path,
            typer.Option(
                "--data",
                help="Prompts in verl's RL parquet shape (id, prompt, file_name, reference_page, reward_model, extra_info).",
            ),
        ],
        corpus: Annotated[
            Path, typer.Option("--corpus", help="pages.parquet (or its folder) to search and crop.")
        ],
        out: OutOpt,
        logs: LogsOpt = None,
        run_id: Annotated[
            str | None,
            typer.Option(
                "--run-id",
                callback=check_run_ids,
                help="Run id of the rollout log. Default: grpo_<timestamp>.",
            ),
        ] = None,
        preset: Annotated[
            str | None,
            typer.Option(
                "--preset",
                help="Optimiser preset: gspo-ddai (seed defaults: sequence ratio, clip 3e-4/4e-4, lr 1e-6, KL 0, entropy 0, two optimizer steps of --batch-size rollouts per rollout batch) or grpo.",
            ),
        ] = None,
        reward: RewardOpt = "curriculum",
        w_judge: WJudgeOpt = None,
        w_ndcg: WNdcgOpt = None,
        w_format: WFormatOpt = None,
        bias: BiasOpt = None,
        gate: GateOpt = None,
        n_agent: Annotated[
            int | None, typer.Option("--n-agent", help="Rollouts per prompt (the GRPO group).")
        ] = None,
        batch_size: Annotated[
            int | None,
            typer.Option(
                "--batch-size",
                help="Rollouts per device optimizer step (prompts × n_agent); under --launch N the "
                "step's global batch is N × this. A rollout batch is this × steps_per_generation "
                "(1, or 2 under --preset gspo-ddai).",
            ),
        ] = None,
        max_steps: StepsOpt = None,
        lr: LrOpt = None,
        epsilon: Annotated[
            float | None, typer.Option("--clip-low", help="Lower clip ε (ratio ≥ 1 − ε).")
        ] = None,
        epsilon_high: Annotated[
            float | None, typer.Option("--clip-high", help="Upper clip ε (ratio ≤ 1 + ε).")
        ] = None,
        beta: Annotated[
            float | None, typer.Option("--kl", help="KL coefficient to the reference model.")
        ] = None,
        entropy: Annotated[
            float | None, typer.Option("--entropy", help="Entropy bonus coefficient.")
        ] = None,
        ratio_level: Annotated[
            str | None,
            typer.Option("--ratio-level", help="Importance ratio: sequence (GSPO) or token."),
        ] = None,
        loss_type: Annotated[
            str | None,
            typer.Option("--loss-type", help="TRL loss_type (grpo, dapo, bnpo, dr_grpo, …)."),
        ] = None,
        temperature: Annotated[
            float | None, typer.Option("--temperature", help="Sampling temperature.")
        ] = None,
        repetition_penalty: RepetitionPenaltyOpt = None,
        max_turns: MaxTurnsOpt = 7,
        search_k: SearchKOpt = 5,
        force_completion: ForceCompletionOpt = True,
        restrict_to_doc: RestrictToDocOpt = False,
        observation: Annotated[
            str,
            typer.Option(
                "--observation",
                help="`text`: pages shown as text; `image`: page images through the model's "
                "processor (VLM policies; needs an image corpus or --image-root; <bbox> is in "
                "Qwen2.5-VL's pixels of the resized image).",
            ),
        ] = "text",
        image_root: Annotated[
            Path | None,
            typer.Option(
                "--image-root",
                help="Folder of page images (`{page_id}.jpg`); not needed with an image corpus "
                "(`ddai corpus build`).",
            ),
        ] = None,
        generator_max_images: Annotated[
            int,
            typer.Option(
                "--generator-max-images",
                help="Most images (pages and crops the episode gathered, latest kept) sent to a "
                "multimodal generator; 0 sends text only. Text generators ignore images.",
            ),
        ] = 8,
        max_turn_tokens: MaxTurnTokensOpt = 256,
        max_completion_tokens: Annotated[
            int, typer.Option("--max-completion-tokens", help="Token budget of a whole rollout.")
        ] = 1024,
        obs_max_tokens: Annotated[
            int, typer.Option("--obs-max-tokens", help="Observation text budget in tokens.")
        ] = 256,
        search: Annotated[
            str | None,
            typer.Option(
                "--search",
                help="Search backend name from ddai.toml (default: local BM25 over --corpus); a "
                "`search-http` backend queries a retrieval service, one batched request per turn.",
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
        vllm: Annotated[
            str | None,
            typer.Option(
                "--vllm", help="`server`: generate through a running `trl vllm-serve` (GPU)."
            ),
        ] = None,
        vllm_url: Annotated[
            str | None, typer.Option("--vllm-url", help="Base URL of the vLLM server.")
        ] = None,
        limit: Annotated[
            int | None, typer.Option("--limit", help="Use only the first N prompts.")
        ] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
        report_to: ReportOpt = None,
        save_steps: SaveOpt = None,
        logging_steps: LogStepsOpt = None,
        resume: ResumeOpt = False,
        dtype: DtypeOpt = "float32",
        lora: LoraOpt = False,
        lora_r: LoraROpt = 16,
        lora_alpha: LoraAlphaOpt = 32,
        lora_target: LoraTargetOpt = "all-linear",
        seed: SeedOpt = 0,
        launch: LaunchOpt = None,
        accelerate_config: AccelerateConfigOpt = None,
        skip_preflight: SkipPreflightOpt = False,
        preflight_prompts: PreflightPromptsOpt = 2,
        as_json: JsonOpt = False,
    ) -> None:
        """GRPO over the multi-turn search environment; every step's rollouts go to the rollout log."""
        maybe_relaunch(launch, accelerate_config)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import TrainConfigError, parse_set
        from ddai.trainer.grpo.train import GRPORunConfig, run_grpo

        try:
            overrides = parse_set(set_)
        except TrainConfigError as e:
            raise fail(str(e)) from e
        if generator_max_images < 0:
            raise fail(f"--generator-max-images {generator_max_images}: use 0 or more")
        for name, path in (("--data", data), ("--corpus", corpus)):
            if not path.exists():
                raise fail(
                    f"{name} {path} not found; make fixture data with `ddai fixtures make OUT`"
                )
        cfg = GRPORunConfig(
            model=model,
            data=data,
            corpus=corpus,
            output_dir=out,
            run_id=run_id,
            logs=logs,
            preset=preset,
            reward=reward,
            w_judge=w_judge,
            w_ndcg=w_ndcg,
            w_format=w_format,
            bias=bias,
            gate=gate,
            n_agent=n_agent,
            batch_size=batch_size,
            max_steps=max_steps,
            learning_rate=lr,
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            beta=beta,
            entropy_coef=entropy,
            importance_sampling_level=ratio_level,
            loss_type=loss_type,
            temperature=temperature,
            repetition_penalty=repetition_penalty,
            max_turns=max_turns,
            search_k=search_k,
            force_completion=force_completion,
            restrict_to_doc=restrict_to_doc,
            observation=observation,
            image_root=image_root,
            generator_max_images=generator_max_images,
            max_turn_tokens=max_turn_tokens,
            max_completion_tokens=max_completion_tokens,
            obs_max_tokens=obs_max_tokens,
            search=search,
            generator=generator,
            judge=judge,
            reward_timeout=reward_timeout,
            vllm=vllm,
            vllm_server_base_url=vllm_url,
            limit=limit,
            seed=seed,
            save_steps=save_steps,
            logging_steps=logging_steps,
            report_to=report_to,
            resume=resume,
            dtype=dtype,
            lora=lora,
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            lora_target=lora_target,
            config_file=config,
            overrides=overrides,
            skip_preflight=skip_preflight,
            preflight_prompts=preflight_prompts,
        )
        result = _run(run_grpo, cfg)
        _summary("ddai train grpo", asdict(result), as_json=as_json)

    app.add_typer(train_app, name="train")
