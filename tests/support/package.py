"""The package's source folders and their modules, as the source-level checks walk them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# repository folder -> the dotted package it installs as (setup.py's ROOTS)
FOLDERS = {
    "ddai_cli": "ddai.cli",
    "pipelines": "ddai.pipelines",
    "trainer": "ddai.trainer",
    "reports": "ddai.reports",
    "sql": "ddai.sql",
}
# Deprecated alias packages (old dotted name -> the package it now names), kept for one release:
# each is an ``__init__`` redirecting imports, no code of its own, so the walks leave it out
# (counted, it would be a second room for the same modules).
ALIASES = {"ddai.trainer.search": "ddai.trainer.episode"}  # moves: keep


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``), in path order;
    the deprecated ``ALIASES`` left out."""
    out = {}
    for folder, dotted in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([dotted, *parts])
            if name not in ALIASES:
                out[name] = path
    return out
