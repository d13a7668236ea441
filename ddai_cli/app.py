"""The ``ddai`` command: one Typer app; each area registers its commands from its own module."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="ddai",
    help="Data-centric RL for agentic search policies: ingest rollout logs, query them, curate the "
    "next round, distill rare successes, report, and train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rich markup would eat bracketed text such as ``[roles]`` and cut flag names at
    # 80 columns; click's formatter prints every character, wraps, and marks [required].
    rich_markup_mode=None,
    add_completion=True,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ddai {version('ddai')}")
        raise typer.Exit()


@app.callback()
def _root(
    _show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print ddai's version and exit."
    ),
) -> None:
    """Options that apply before any command (the app's help text above is what --help shows)."""


# Each module defines ``register(app)``; the order is the order of ``ddai --help``.
_MODULES = (
    "demo",
    "ingest",
    "query",
    "fixtures",
    "corpus",
    "curate",
    "analyze",
    "distill",
    "report",
    "serve",
    "backends",
    "train",
    "model",
    "value",
    "collect",
    "pointer",
)
for _name in _MODULES:
    importlib.import_module(f"ddai.cli.{_name}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
