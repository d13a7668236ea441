"""CLI: ``ddai collect``: rollouts without training (off-policy collection, evaluation),
from a local policy or an OpenAI-compatible server (``--generate-via NAME``); flags from
``CollectConfig``."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, fail, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import INPUTS, PREFLIGHT, default_of, episode_settings, require_inputs
from ddai.cli.running import AppendRunOpt, refuse_existing_run, run_or_fail
from ddai.trainer.episode.collect_config import CollectConfig

COLLECT_FLAGS = config_flags(
    CollectConfig,
    {
        **dict.fromkeys(("model", "generate_via")),
        **INPUTS,
        **dict.fromkeys(("dtype", "seed", "n_agent", "batch_size", "temperature", "top_p")),
        "top_k": None,
        **dict.fromkeys(("observation", "image_root", "generator_max_images")),
        **PREFLIGHT,
    },
)
"""Every flag of ``ddai collect`` that fills a ``CollectConfig`` field (the nested episode
settings are ``options.episode_settings``)."""


@with_groups({"cfg": COLLECT_FLAGS, "nested": episode_settings})
def train_collect_command(
    *,
    cfg: dict[str, Any],
    nested: dict[str, Any],
    logs: LogsOpt = default_of(CollectConfig, "logs"),
    append: AppendRunOpt = False,
    progress: ProgressOpt = default_of(CollectConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Roll out a policy over a prompt set and log the scored episodes, without training; exits 1
    when every search failed or no rollout could be scored."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.episode.collect import run_collect

    config = CollectConfig(**cfg, **nested, logs=logs, progress=progress and not as_json)
    require_inputs(config.data, config.corpus)
    refuse_existing_run("ddai collect", logs, config.run_id, append=append)
    result = run_or_fail(run_collect, config)
    summary("ddai collect", asdict(result), as_json=as_json)
    if result.failure is not None:
        raise fail(result.failure, 1)


register = top_command("collect", train_collect_command)
