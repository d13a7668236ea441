"""CLI: ``ddai train sft`` (TRL-based): flags from ``SFTRunConfig`` (``run_specs``' plain specs for
the fields every run of its kind has); its own module, so its ``--help`` builds no episode group."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, ProgressOpt
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.run_specs import LORA, POLICY, TRL
from ddai.cli.running import device_options, main_summary, maybe_relaunch
from ddai.cli.running import run_or_fail as run
from ddai.trainer.sft.config import SFTRunConfig

SFT_FLAGS = config_flags(
    SFTRunConfig,
    {
        **POLICY,
        "data": {"metavar": "<file>"},
        **TRL,
        **dict.fromkeys(("epochs", "batch_size", "grad_accum", "max_length")),
        "assistant_only_loss": "--assistant-only-loss/--no-assistant-only-loss",
        "image_root": None,
        **LORA,
    },
)


@with_groups({"cfg": SFT_FLAGS, "device": device_options})
def sft(
    *,
    cfg: dict[str, Any],
    device: dict[str, Any],
    progress: ProgressOpt = default_of(SFTRunConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Supervised fine-tuning with TRL's SFTTrainer on Searcher conversations."""
    maybe_relaunch(**device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.cli.episode_train import parsed_sets  # the run's: not for --help
    from ddai.trainer.sft.train import run_sft

    sets = parsed_sets(cfg)
    config = SFTRunConfig(**cfg, overrides=sets, progress=progress and not as_json)
    main_summary("ddai train sft", asdict(run(run_sft, config)), as_json=as_json)


register = subcommand("train", "sft", sft)
