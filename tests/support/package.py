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


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``), in path order."""
    out = {}
    for folder, dotted in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([dotted, *parts])] = path
    return out
