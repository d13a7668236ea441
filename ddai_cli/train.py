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
    CorpusOpt,
    LimitOpt,
    PromptDataOpt,
    RepetitionPenaltyOpt,
    SetOpt,
    default_of,
    device_options,
    episode_settings,
    lora_flags,
    preflight_flags,
    require_inputs,
    run_flags,
    run_id_option,
    trl_flags,
)
from ddai.cli.running import (
    TRAIN_HELP,
    AppendRunOpt,
    main_summary,
    maybe_relaunch,
    refuse_existing_run,
    run_or_fail,
    sub_app,
)
from ddai.trainer.grpo.config import GRPORunConfig
from ddai.trainer.sft.config import SFTRunConfig

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

    @train_app.command("sft", short_help="Supervised fine-tuning on Searcher conversations (TRL).")
    @with_groups(
        {
            "run": run_flags(SFTRunConfig),
            "trl": trl_flags(SFTRunConfig),
            "device": device_options,
            "settings": SFT_FLAGS,
            "adapter": lora_flags(SFTRunConfig),
        }
    )
    def sft(
        *,
        run: dict[str, Any],
        data: Annotated[
            list[Path],
            typer.Option(
                "--data",
                metavar="<file>",
                help="`ddai distill` output or DDAI train1 file(s) (Parquet/JSONL, a `messages` column); repeatable.",
            ),
        ],
        trl: dict[str, Any],
        set_: SetOpt = None,
        device: dict[str, Any],
        progress: ProgressOpt = default_of(SFTRunConfig, "progress"),
        as_json: JsonOpt = False,
        settings: dict[str, Any],
        adapter: dict[str, Any],
    ) -> None:
        """Supervised fine-tuning with TRL's SFTTrainer on Searcher conversations."""
        maybe_relaunch(**device)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import parse_set
        from ddai.trainer.sft.train import run_sft

        overrides = run_or_fail(parse_set, set_)
        cfg = SFTRunConfig(
            **run,
            **trl,
            **settings,
            **adapter,
            data=data,
            overrides=overrides,
            progress=progress and not as_json,
        )
        result = run_or_fail(run_sft, cfg)
        main_summary("ddai train sft", asdict(result), as_json=as_json)

    @train_app.command("grpo", short_help="GRPO over the multi-turn search environment.")
    @with_groups(
        {
            "run": run_flags(GRPORunConfig),
            "trl": trl_flags(GRPORunConfig),
            "device": device_options,
            "preflight": preflight_flags(GRPORunConfig),
            "nested": episode_settings,
            "settings": GRPO_FLAGS,
            "adapter": lora_flags(GRPORunConfig),
        }
    )
    def grpo(
        *,
        run: dict[str, Any],
        data: PromptDataOpt,
        corpus: CorpusOpt,
        logs: LogsOpt = default_of(GRPORunConfig, "logs"),
        run_id: GRPO_RUN_ID = default_of(GRPORunConfig, "run_id"),
        append: AppendRunOpt = False,
        trl: dict[str, Any],
        repetition_penalty: RepetitionPenaltyOpt = default_of(GRPORunConfig, "repetition_penalty"),
        limit: LimitOpt = default_of(GRPORunConfig, "limit"),
        set_: SetOpt = None,
        device: dict[str, Any],
        preflight: dict[str, Any],
        progress: ProgressOpt = default_of(GRPORunConfig, "progress"),
        as_json: JsonOpt = False,
        settings: dict[str, Any],
        adapter: dict[str, Any],
        nested: dict[str, Any],
    ) -> None:
        """GRPO over the multi-turn search environment; every step's rollouts go to the rollout log."""
        refuse_existing_run(
            "ddai train grpo", logs, run_id, append=append, resume=bool(trl.get("resume"))
        )
        maybe_relaunch(**device)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from ddai.trainer.common import parse_set
        from ddai.trainer.grpo.train import run_grpo

        overrides = run_or_fail(parse_set, set_)
        require_inputs(data, corpus)
        cfg = GRPORunConfig(
            **run,
            **trl,
            data=data,
            corpus=corpus,
            run_id=run_id,
            logs=logs,
            **nested,
            **settings,
            **adapter,
            **preflight,
            repetition_penalty=repetition_penalty,
            limit=limit,
            overrides=overrides,
            progress=progress and not as_json,
        )
        run_or_fail(cfg.check)
        result = run_or_fail(run_grpo, cfg)
        main_summary("ddai train grpo", asdict(result), as_json=as_json)
