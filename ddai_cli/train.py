"""CLI: ``ddai train sft`` and ``ddai train grpo`` (TRL-based)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, check_run_ids
from ddai.cli.options import (
    AccelerateConfigOpt,
    ConfigOpt,
    CorpusOpt,
    DtypeOpt,
    LaunchOpt,
    LimitOpt,
    LogStepsOpt,
    LoraAlphaOpt,
    LoraOpt,
    LoraROpt,
    LoraTargetOpt,
    LrOpt,
    ModelOpt,
    OutOpt,
    PreflightPromptsOpt,
    PromptDataOpt,
    RepetitionPenaltyOpt,
    ReportOpt,
    ResumeOpt,
    SaveOpt,
    SeedOpt,
    SetOpt,
    SkipPreflightOpt,
    StepsOpt,
    default_of,
    require_inputs,
    with_groups,
)
from ddai.cli.running import TRAIN_HELP, main_summary, maybe_relaunch, run_or_fail, sub_app
from ddai.trainer.grpo.config import GRPORunConfig
from ddai.trainer.search.config import EpisodeBackends, EpisodeConfig, RewardOverrides
from ddai.trainer.sft.train import SFTRunConfig


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    train_app = sub_app(app, "train", TRAIN_HELP)

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
        epochs: Annotated[
            float | None, typer.Option("--epochs", help="Training epochs.")
        ] = default_of(SFTRunConfig, "epochs"),
        max_steps: StepsOpt = default_of(SFTRunConfig, "max_steps"),
        lr: LrOpt = default_of(SFTRunConfig, "learning_rate"),
        batch_size: Annotated[
            int | None, typer.Option("--batch-size", help="Conversations per device step.")
        ] = default_of(SFTRunConfig, "batch_size"),
        grad_accum: Annotated[
            int | None, typer.Option("--grad-accum", help="Gradient accumulation steps.")
        ] = default_of(SFTRunConfig, "grad_accum"),
        max_length: Annotated[
            int | None,
            typer.Option("--max-length", help="Truncate conversations to this many tokens."),
        ] = default_of(SFTRunConfig, "max_length"),
        assistant_only_loss: Annotated[
            bool, typer.Option(help="Loss on the Searcher's turns only (observations masked).")
        ] = default_of(SFTRunConfig, "assistant_only_loss"),
        lora: LoraOpt = default_of(SFTRunConfig, "lora"),
        lora_r: LoraROpt = default_of(SFTRunConfig, "lora_r"),
        lora_alpha: LoraAlphaOpt = default_of(SFTRunConfig, "lora_alpha"),
        lora_target: LoraTargetOpt = default_of(SFTRunConfig, "lora_target"),
        image_root: Annotated[
            Path | None,
            typer.Option(
                "--image-root",
                help="Folder of the page images the conversations show, found by file name "
                "(VLM models, i.e. a model folder with a processor: images stay images).",
            ),
        ] = default_of(SFTRunConfig, "image_root"),
        config: ConfigOpt = default_of(SFTRunConfig, "config_file"),
        set_: SetOpt = None,
        report_to: ReportOpt = default_of(SFTRunConfig, "report_to"),
        save_steps: SaveOpt = default_of(SFTRunConfig, "save_steps"),
        logging_steps: LogStepsOpt = default_of(SFTRunConfig, "logging_steps"),
        resume: ResumeOpt = default_of(SFTRunConfig, "resume"),
        dtype: DtypeOpt = default_of(SFTRunConfig, "dtype"),
        seed: SeedOpt = default_of(SFTRunConfig, "seed"),
        launch: LaunchOpt = None,
        accelerate_config: AccelerateConfigOpt = None,
        progress: ProgressOpt = default_of(SFTRunConfig, "progress"),
        as_json: JsonOpt = False,
    ) -> None:
        """Supervised fine-tuning with TRL's SFTTrainer on Searcher conversations."""
        maybe_relaunch(launch, accelerate_config)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import parse_set
        from ddai.trainer.sft.train import run_sft

        overrides = run_or_fail(parse_set, set_)
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
            progress=progress and not as_json,
        )
        result = run_or_fail(run_sft, cfg)
        main_summary("ddai train sft", asdict(result), as_json=as_json)

    @train_app.command("grpo")
    @with_groups()
    def grpo(
        model: ModelOpt,
        data: PromptDataOpt,
        corpus: CorpusOpt,
        out: OutOpt,
        logs: LogsOpt = default_of(GRPORunConfig, "logs"),
        run_id: Annotated[
            str | None,
            typer.Option(
                "--run-id",
                callback=check_run_ids,
                help="Run id of the rollout log. Default: grpo_<timestamp>.",
            ),
        ] = default_of(GRPORunConfig, "run_id"),
        preset: Annotated[
            str | None,
            typer.Option(
                "--preset",
                help="Optimiser preset: gspo-ddai (seed defaults: sequence ratio, clip 3e-4/4e-4, lr 1e-6, KL 0, entropy 0, two optimizer steps of --batch-size rollouts per rollout batch) or grpo.",
            ),
        ] = default_of(GRPORunConfig, "preset"),
        n_agent: Annotated[
            int | None, typer.Option("--n-agent", help="Rollouts per prompt (the GRPO group).")
        ] = default_of(GRPORunConfig, "n_agent"),
        batch_size: Annotated[
            int | None,
            typer.Option(
                "--batch-size",
                help="Rollouts per device optimizer step (prompts × n_agent); under --launch N the "
                "step's global batch is N × this. A rollout batch is this × steps_per_generation "
                "(1, or 2 under --preset gspo-ddai).",
            ),
        ] = default_of(GRPORunConfig, "batch_size"),
        max_steps: StepsOpt = default_of(GRPORunConfig, "max_steps"),
        lr: LrOpt = default_of(GRPORunConfig, "learning_rate"),
        epsilon: Annotated[
            float | None, typer.Option("--clip-low", help="Lower clip ε (ratio ≥ 1 − ε).")
        ] = default_of(GRPORunConfig, "epsilon"),
        epsilon_high: Annotated[
            float | None, typer.Option("--clip-high", help="Upper clip ε (ratio ≤ 1 + ε).")
        ] = default_of(GRPORunConfig, "epsilon_high"),
        beta: Annotated[
            float | None, typer.Option("--kl", help="KL coefficient to the reference model.")
        ] = default_of(GRPORunConfig, "beta"),
        entropy: Annotated[
            float | None, typer.Option("--entropy", help="Entropy bonus coefficient.")
        ] = default_of(GRPORunConfig, "entropy_coef"),
        ratio_level: Annotated[
            str | None,
            typer.Option("--ratio-level", help="Importance ratio: sequence (GSPO) or token."),
        ] = default_of(GRPORunConfig, "importance_sampling_level"),
        loss_type: Annotated[
            str | None,
            typer.Option("--loss-type", help="TRL loss_type (grpo, dapo, bnpo, dr_grpo, …)."),
        ] = default_of(GRPORunConfig, "loss_type"),
        temperature: Annotated[
            float | None, typer.Option("--temperature", help="Sampling temperature.")
        ] = default_of(GRPORunConfig, "temperature"),
        repetition_penalty: RepetitionPenaltyOpt = default_of(GRPORunConfig, "repetition_penalty"),
        observation: Annotated[
            str,
            typer.Option(
                "--observation",
                help="`text`: pages shown as text; `image`: page images through the model's "
                "processor (VLM policies; needs an image corpus or --image-root; <bbox> is in "
                "Qwen2.5-VL's pixels of the resized image).",
            ),
        ] = default_of(GRPORunConfig, "observation"),
        image_root: Annotated[
            Path | None,
            typer.Option(
                "--image-root",
                help="Folder of page images (`{page_id}.jpg`); not needed with an image corpus "
                "(`ddai corpus build`).",
            ),
        ] = default_of(GRPORunConfig, "image_root"),
        generator_max_images: Annotated[
            int,
            typer.Option(
                "--generator-max-images",
                help="Most images (pages and crops the episode gathered, latest kept) sent to a "
                "multimodal generator; 0 sends text only. Text generators ignore images.",
            ),
        ] = default_of(GRPORunConfig, "generator_max_images"),
        vllm: Annotated[
            str | None,
            typer.Option(
                "--vllm", help="`server`: generate through a running `trl vllm-serve` (GPU)."
            ),
        ] = default_of(GRPORunConfig, "vllm"),
        vllm_url: Annotated[
            str | None, typer.Option("--vllm-url", help="Base URL of the vLLM server.")
        ] = default_of(GRPORunConfig, "vllm_server_base_url"),
        limit: LimitOpt = default_of(GRPORunConfig, "limit"),
        config: ConfigOpt = default_of(GRPORunConfig, "config_file"),
        set_: SetOpt = None,
        report_to: ReportOpt = default_of(GRPORunConfig, "report_to"),
        save_steps: SaveOpt = default_of(GRPORunConfig, "save_steps"),
        logging_steps: LogStepsOpt = default_of(GRPORunConfig, "logging_steps"),
        resume: ResumeOpt = default_of(GRPORunConfig, "resume"),
        dtype: DtypeOpt = default_of(GRPORunConfig, "dtype"),
        lora: LoraOpt = default_of(GRPORunConfig, "lora"),
        lora_r: LoraROpt = default_of(GRPORunConfig, "lora_r"),
        lora_alpha: LoraAlphaOpt = default_of(GRPORunConfig, "lora_alpha"),
        lora_target: LoraTargetOpt = default_of(GRPORunConfig, "lora_target"),
        seed: SeedOpt = default_of(GRPORunConfig, "seed"),
        launch: LaunchOpt = None,
        accelerate_config: AccelerateConfigOpt = None,
        skip_preflight: SkipPreflightOpt = default_of(GRPORunConfig, "skip_preflight"),
        preflight_prompts: PreflightPromptsOpt = default_of(GRPORunConfig, "preflight_prompts"),
        progress: ProgressOpt = default_of(GRPORunConfig, "progress"),
        as_json: JsonOpt = False,
        *,
        rewards: RewardOverrides,
        episode: EpisodeConfig,
        backends: EpisodeBackends,
    ) -> None:
        """GRPO over the multi-turn search environment; every step's rollouts go to the rollout log."""
        maybe_relaunch(launch, accelerate_config)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import parse_set
        from ddai.trainer.grpo.train import run_grpo

        overrides = run_or_fail(parse_set, set_)
        require_inputs(data, corpus)
        cfg = GRPORunConfig(
            model=model,
            data=data,
            corpus=corpus,
            output_dir=out,
            run_id=run_id,
            logs=logs,
            preset=preset,
            episode=episode,
            rewards=rewards,
            backends=backends,
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
            observation=observation,
            image_root=image_root,
            generator_max_images=generator_max_images,
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
            progress=progress and not as_json,
            skip_preflight=skip_preflight,
            preflight_prompts=preflight_prompts,
        )
        run_or_fail(cfg.check)
        result = run_or_fail(run_grpo, cfg)
        main_summary("ddai train grpo", asdict(result), as_json=as_json)
