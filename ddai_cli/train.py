"""CLI: ``ddai train sft`` and ``ddai train grpo`` (TRL-based)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import (
    AccelerateConfigOpt,
    ConfigOpt,
    CorpusOpt,
    DtypeOpt,
    LaunchOpt,
    LimitOpt,
    LogStepsOpt,
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
    episode_settings,
    lora_flags,
    require_inputs,
    run_id_option,
)
from ddai.cli.running import TRAIN_HELP, main_summary, maybe_relaunch, run_or_fail, sub_app
from ddai.trainer.grpo.config import GRPORunConfig
from ddai.trainer.sft.train import SFTRunConfig

GRPO_RUN_ID = run_id_option("grpo")

SFT_FLAGS = config_flags(
    SFTRunConfig,
    {
        "epochs": None,
        "batch_size": None,
        "grad_accum": None,
        "max_length": None,
        "assistant_only_loss": "--assistant-only-loss/--no-assistant-only-loss",
        "image_root": None,
    },
)
"""The SFT flags whose type, default and help are ``SFTRunConfig``'s own."""

GRPO_FLAGS = config_flags(
    GRPORunConfig,
    {
        "preset": None,
        "n_agent": None,
        "batch_size": None,
        "epsilon": "--clip-low",
        "epsilon_high": "--clip-high",
        "beta": "--kl",
        "entropy_coef": "--entropy",
        "importance_sampling_level": "--ratio-level",
        "loss_type": None,
        "temperature": None,
        "observation": None,
        "image_root": None,
        "generator_max_images": None,
        "vllm": None,
        "vllm_server_base_url": "--vllm-url",
    },
)
"""The GRPO flags whose type, default and help are ``GRPORunConfig``'s own."""


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    train_app = sub_app(app, "train", TRAIN_HELP)

    @train_app.command("sft")
    @with_groups({"settings": SFT_FLAGS, "adapter": lora_flags(SFTRunConfig)})
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
        max_steps: StepsOpt = default_of(SFTRunConfig, "max_steps"),
        lr: LrOpt = default_of(SFTRunConfig, "learning_rate"),
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
        *,
        settings: dict[str, Any],
        adapter: dict[str, Any],
    ) -> None:
        """Supervised fine-tuning with TRL's SFTTrainer on Searcher conversations."""
        maybe_relaunch(launch, accelerate_config)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import parse_set
        from ddai.trainer.sft.train import run_sft

        overrides = run_or_fail(parse_set, set_)
        cfg = SFTRunConfig(
            **settings,
            **adapter,
            model=model,
            data=data,
            output_dir=out,
            max_steps=max_steps,
            learning_rate=lr,
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
    @with_groups(
        {"nested": episode_settings, "settings": GRPO_FLAGS, "adapter": lora_flags(GRPORunConfig)}
    )
    def grpo(
        model: ModelOpt,
        data: PromptDataOpt,
        corpus: CorpusOpt,
        out: OutOpt,
        logs: LogsOpt = default_of(GRPORunConfig, "logs"),
        run_id: GRPO_RUN_ID = default_of(GRPORunConfig, "run_id"),
        max_steps: StepsOpt = default_of(GRPORunConfig, "max_steps"),
        lr: LrOpt = default_of(GRPORunConfig, "learning_rate"),
        repetition_penalty: RepetitionPenaltyOpt = default_of(GRPORunConfig, "repetition_penalty"),
        limit: LimitOpt = default_of(GRPORunConfig, "limit"),
        config: ConfigOpt = default_of(GRPORunConfig, "config_file"),
        set_: SetOpt = None,
        report_to: ReportOpt = default_of(GRPORunConfig, "report_to"),
        save_steps: SaveOpt = default_of(GRPORunConfig, "save_steps"),
        logging_steps: LogStepsOpt = default_of(GRPORunConfig, "logging_steps"),
        resume: ResumeOpt = default_of(GRPORunConfig, "resume"),
        dtype: DtypeOpt = default_of(GRPORunConfig, "dtype"),
        seed: SeedOpt = default_of(GRPORunConfig, "seed"),
        launch: LaunchOpt = None,
        accelerate_config: AccelerateConfigOpt = None,
        skip_preflight: SkipPreflightOpt = default_of(GRPORunConfig, "skip_preflight"),
        preflight_prompts: PreflightPromptsOpt = default_of(GRPORunConfig, "preflight_prompts"),
        progress: ProgressOpt = default_of(GRPORunConfig, "progress"),
        as_json: JsonOpt = False,
        *,
        settings: dict[str, Any],
        adapter: dict[str, Any],
        nested: dict[str, Any],
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
            **nested,
            **settings,
            **adapter,
            max_steps=max_steps,
            learning_rate=lr,
            repetition_penalty=repetition_penalty,
            limit=limit,
            seed=seed,
            save_steps=save_steps,
            logging_steps=logging_steps,
            report_to=report_to,
            resume=resume,
            dtype=dtype,
            config_file=config,
            overrides=overrides,
            progress=progress and not as_json,
            skip_preflight=skip_preflight,
            preflight_prompts=preflight_prompts,
        )
        run_or_fail(cfg.check)
        result = run_or_fail(run_grpo, cfg)
        main_summary("ddai train grpo", asdict(result), as_json=as_json)
