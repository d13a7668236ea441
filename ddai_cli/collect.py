"""CLI: ``ddai collect``: rollouts without training (off-policy collection, evaluation),
from a local policy or an OpenAI-compatible server (``--generate-via NAME``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, fail, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import (
    CorpusOpt,
    GenerateViaOpt,
    PolicyDtypeOpt,
    PromptDataOpt,
    default_of,
    episode_settings,
    preflight_flags,
    require_inputs,
)
from ddai.cli.running import (
    AppendRunOpt,
    refuse_existing_run,
    run_or_fail,
)
from ddai.trainer.episode.collect import CollectConfig

COLLECT_FLAGS = config_flags(
    CollectConfig,
    {
        name: None
        for name in (
            "n_agent",
            "batch_size",
            "temperature",
            "top_p",
            "top_k",
            "limit",
            "observation",
            "image_root",
            "generator_max_images",
        )
    },
)
"""The collect flags whose type, default and help are ``CollectConfig``'s own."""


@with_groups(
    {
        "nested": episode_settings,
        "settings": COLLECT_FLAGS,
        "preflight": preflight_flags(CollectConfig),
    }
)
def train_collect_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="The policy (a local folder or hub id); with --generate-via, only its tokenizer "
            "and chat template (those of the server's model).",
        ),
    ],
    data: PromptDataOpt,
    corpus: CorpusOpt,
    generate_via: GenerateViaOpt = default_of(CollectConfig, "generate_via"),
    logs: LogsOpt = default_of(CollectConfig, "logs"),
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="Run id of the rollout log. Default: collect_<timestamp>."),
    ] = default_of(CollectConfig, "run_id"),
    append: AppendRunOpt = False,
    dtype: PolicyDtypeOpt = default_of(CollectConfig, "dtype"),
    seed: Annotated[
        int, typer.Option("--seed", help="Sampling seed (plus the rank).")
    ] = default_of(CollectConfig, "seed"),
    progress: ProgressOpt = default_of(CollectConfig, "progress"),
    as_json: JsonOpt = False,
    *,
    settings: dict[str, Any],
    nested: dict[str, Any],
    preflight: dict[str, Any],
) -> None:
    """Roll out a policy over a prompt set and log the scored episodes, without training; exits 1
    when every search failed or no rollout could be scored."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.episode.collect import run_collect

    require_inputs(data, corpus)
    refuse_existing_run("ddai collect", logs, run_id, append=append)
    cfg = CollectConfig(
        model=model,
        data=data,
        corpus=corpus,
        **nested,
        **settings,
        **preflight,
        generate_via=generate_via,
        run_id=run_id,
        logs=logs,
        dtype=dtype,
        seed=seed,
        progress=progress and not as_json,
    )
    result = run_or_fail(run_collect, cfg)
    summary("ddai collect", asdict(result), as_json=as_json)
    if result.failure is not None:
        raise fail(result.failure, 1)


def register(app: typer.Typer) -> None:
    """Add ``collect`` (its old path ``ddai train collect`` is rewritten to it by ``app.py``)."""
    app.command(
        "collect", short_help="Roll out a policy and log scored episodes, without training."
    )(train_collect_command)
