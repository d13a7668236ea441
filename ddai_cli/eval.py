"""CLI: ``ddai eval``: a Searcher policy (local, or served with ``--generate-via NAME``) over a test
set in DDAI's format, logged as a run and scored by the set's own categories
(``trainer/episode/evaluate.py``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import (
    CorpusOpt,
    GenerateViaOpt,
    PolicyDtypeOpt,
    default_of,
    episode_settings,
    preflight_flags,
    require_inputs,
)
from ddai.cli.running import run_or_fail
from ddai.trainer.episode.evaluate import EvalConfig

EVAL_FLAGS = config_flags(
    EvalConfig,
    {
        **{name: None for name in ("n_agent", "batch_size", "temperature", "top_p", "top_k")},
        "limit": None,
        "by": None,
        "append": None,
    },
)
"""The eval flags whose type, default and help are ``EvalConfig``'s own."""


@with_groups(
    {
        "nested": episode_settings,
        "settings": EVAL_FLAGS,
        "preflight": preflight_flags(EvalConfig),
    }
)
def eval_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="The policy (a local folder or hub id); with --generate-via, only its tokenizer "
            "and chat template (those of the server's model).",
        ),
    ],
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            help="The test set in verl's RL parquet shape, e.g. DDAI's overall_test_crop.parquet "
            "(its data_source and *_type fields are the categories).",
        ),
    ],
    corpus: CorpusOpt,
    generate_via: GenerateViaOpt = default_of(EvalConfig, "generate_via"),
    logs: LogsOpt = default_of(EvalConfig, "logs"),
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="Run id of the rollout log. Default: eval_<timestamp>."),
    ] = default_of(EvalConfig, "run_id"),
    dtype: PolicyDtypeOpt = default_of(EvalConfig, "dtype"),
    seed: Annotated[
        int, typer.Option("--seed", help="Sampling seed (plus the rank).")
    ] = default_of(EvalConfig, "seed"),
    progress: ProgressOpt = default_of(EvalConfig, "progress"),
    as_json: JsonOpt = False,
    *,
    settings: dict[str, Any],
    nested: dict[str, Any],
    preflight: dict[str, Any],
) -> None:
    """Evaluate a Searcher policy on a test set: accuracy, judge and NDCG by its categories."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.episode.evaluate import run_eval

    require_inputs(data, corpus)
    cfg = EvalConfig(
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
    summary("ddai eval", asdict(run_or_fail(run_eval, cfg)), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``eval``."""
    app.command("eval")(eval_command)
