"""CLI: `ddai train` (not yet built)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
