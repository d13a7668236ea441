"""CLI: ``ddai train collect``: rollouts without training (off-policy collection, evaluation),
from a local policy or an OpenAI-compatible server (``--generate-via NAME``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import (
    CorpusOpt,
    PromptDataOpt,
    default_of,
    episode_settings,
    require_inputs,
)
from ddai.cli.running import (
    TRAIN_HELP,
    AppendRunOpt,
    refuse_existing_run,
    run_or_fail,
    sub_app,
)
from ddai.trainer.search.collect import CollectConfig

COLLECT_FLAGS = config_flags(
    CollectConfig,
    {name: None for name in ("n_agent", "batch_size", "temperature", "top_p", "top_k", "limit")},
)
"""The collect flags whose type, default and help are ``CollectConfig``'s own."""


@with_groups({"nested": episode_settings, "settings": COLLECT_FLAGS})
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
    generate_via: Annotated[
        str | None,
        typer.Option(
            "--generate-via",
            help="Generate the policy's turns through this OpenAI-compatible server: a "
            "[backends.NAME] table of kind openai in ddai.toml (base_url, model). Default: the "
            "local --model.",
        ),
    ] = default_of(CollectConfig, "generate_via"),
    logs: LogsOpt = default_of(CollectConfig, "logs"),
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="Run id of the rollout log. Default: collect_<timestamp>."),
    ] = default_of(CollectConfig, "run_id"),
    append: AppendRunOpt = False,
    dtype: Annotated[
        str, typer.Option("--dtype", help="Local policy dtype: float32 (CPU), bfloat16, ...")
    ] = default_of(CollectConfig, "dtype"),
    seed: Annotated[
        int, typer.Option("--seed", help="Sampling seed (plus the rank).")
    ] = default_of(CollectConfig, "seed"),
    progress: ProgressOpt = default_of(CollectConfig, "progress"),
    as_json: JsonOpt = False,
    *,
    settings: dict[str, Any],
    nested: dict[str, Any],
) -> None:
    """Roll out a policy over a prompt set and log the scored episodes, without training."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.search.collect import run_collect

    require_inputs(data, corpus)
    refuse_existing_run("ddai train collect", logs, run_id, append=append)
    cfg = CollectConfig(
        model=model,
        data=data,
        corpus=corpus,
        **nested,
        **settings,
        generate_via=generate_via,
        run_id=run_id,
        logs=logs,
        dtype=dtype,
        seed=seed,
        progress=progress and not as_json,
    )
    summary("ddai train collect", asdict(run_or_fail(run_collect, cfg)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``train collect`` to the ``train`` group."""
    train_app = sub_app(app, "train", TRAIN_HELP)
    train_app.command("collect")(train_collect_command)
