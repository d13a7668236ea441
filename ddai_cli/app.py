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
    add_completion=False,
)

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
