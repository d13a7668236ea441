"""CLI: ``ddai fixtures make``: write the synthetic world (corpus, prompts, simulated runs, truth)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, fail, summary
from ddai.pipelines.fixtures import SIZES, make_world
from ddai.pipelines.fixtures.world import parse_size

fixtures_app = typer.Typer(
    help="The synthetic world: a page corpus, a prompt set and simulated runs with a truth table.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@dataclass(frozen=True)
class MakeConfig:
    out: Path
    seed: int
    size: str
    progress: bool


def _make(cfg: MakeConfig) -> dict:
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


@fixtures_app.command(
    "make", short_help="Write the synthetic world: pages, prompts, runs, truth table."
)
def make_cmd(
    out: Annotated[
        Path,
        typer.Argument(metavar="DIR", help="Folder to write the world into (created if missing)."),
    ],
    seed: Annotated[
        int, typer.Option("--seed", help="Random seed; the world is a function of it.")
    ] = 0,
    size: Annotated[
        str,
        typer.Option(
            "--size",
            help=f"{', '.join(f'{k} ({v[0]} prompts)' for k, v in SIZES.items())}, or a number of "
            "prompts (at least 10). The default is what fixtures/ holds.",
        ),
    ] = "small",
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Write pages.parquet, dataset.parquet, logs/<run>.jsonl, unified/<run>/, reviews/ and
    truth.json into OUT."""
    try:
        parse_size(size)
    except ValueError as e:
        raise fail(f"--size: {e}") from e
    if out.exists() and not out.is_dir():
        raise fail(f"{out} is a file; give a folder to write the world into")
    cfg = MakeConfig(out=out, seed=seed, size=size, progress=progress and not as_json)
    summary("ddai fixtures make", _make(cfg), as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(fixtures_app, name="fixtures")
