"""The ``--force`` flag every step that skips unchanged work shares (the funnel's steps, ``distill``,
``distill vet``): its own light module, so that a command reads it without loading another step's
configs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ForceFlag:
    """A step whose inputs and parameters are unchanged is skipped unless ``force``."""

    force: bool = False
    """Rerun even when inputs and parameters are unchanged."""
