"""The "wrong --input-format?" hint: when an explicit input format read nothing, say what the files'
content looks like, so the fix is one flag away instead of a trip through the quarantine file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ddai.pipelines.adapters import detect


def other_formats(sources: Iterable[Path | str], chosen: str) -> dict[str, str]:
    """``{source: detected format}`` for each source whose content is a format other than
    ``chosen``; sources no reader recognises are left out (there is nothing to suggest)."""
    found: dict[str, str] = {}
    for src in sources:
        try:
            fmt = detect(Path(src))
        except (ValueError, OSError):
            continue
        if fmt != chosen:
            found[str(src)] = fmt
    return found


def wrong_format_hint(sources: Iterable[Path | str], chosen: str) -> str | None:
    """One line for the user, or None when detection agrees with ``chosen`` (or finds nothing)."""
    found = other_formats(sources, chosen)
    if not found:
        return None
    detected = sorted(set(found.values()))
    # One detected format: suggest it; several: auto picks each file's own.
    fix = (
        f"--input-format {detected[0]} or --input-format auto"
        if len(detected) == 1
        else "--input-format auto"
    )
    return f"wrong --input-format? detected: {', '.join(detected)} ({', '.join(found)}); rerun with {fix}"
