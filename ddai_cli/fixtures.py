"""CLI: ``ddai fixtures make``: write the synthetic world (corpus, prompts, simulated runs, truth)."""

from __future__ import annotations

from typing import Any

import typer

from ddai.cli.app import group_app, group_command
from ddai.cli.common import JsonOpt, ProgressOpt, bad_input_exits, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.fixtures.world_config import MakeConfig

fixtures_app = group_app("fixtures")


def _make(cfg: MakeConfig) -> dict:
    from ddai.pipelines.fixtures import make_world  # the writer and simulated runs: not for --help

    if not cfg.progress:
        return make_world(cfg.out, seed=cfg.seed, size=cfg.size)
    # rich's progress and console: loaded when the bar is drawn, not for --help
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        tasks: dict[str, int] = {}

        def report(run: str, done: int, total: int) -> None:
            if run not in tasks:
                tasks[run] = bar.add_task(f"simulating {run} (prompts)", total=total)
            bar.update(tasks[run], completed=done)

        return make_world(cfg.out, seed=cfg.seed, size=cfg.size, progress=report)


MAKE_FLAGS = config_flags(
    MakeConfig,
    {"out": {"argument": True, "metavar": "DIR"}, "seed": "--seed", "size": "--size"},
)


@group_command(fixtures_app, "fixtures", "make")
@with_groups({"settings": MAKE_FLAGS})
def make_cmd(
    *, settings: dict[str, Any], progress: ProgressOpt = True, as_json: JsonOpt = False
) -> None:
    """Write pages.parquet, dataset.parquet, logs/<run>.jsonl, unified/<run>/, reviews/ and
    truth.json into OUT."""
    with bad_input_exits():
        cfg = MakeConfig(**settings, progress=progress and not as_json)
    summary("ddai fixtures make", _make(cfg), as_json=as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(fixtures_app, name="fixtures")
