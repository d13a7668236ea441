"""Which settings of a config dataclass a user set away from their defaults: the one test behind
every refusal of a flag that a run would parse and then not read (curate bucket, focus and
verify-gt, pointer train, the LoRA flags of the training commands)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any


def changed(cfg: Any, names: Iterable[str] | None = None) -> list[str]:
    """The fields of the dataclass instance ``cfg`` (those in ``names``, else all) whose value
    differs from the field's default, in field order. A field without a plain default (required,
    or a default factory) is never reported."""
    wanted = None if names is None else set(names)
    return [
        f.name
        for f in fields(cfg)
        if (wanted is None or f.name in wanted)
        and f.default is not MISSING
        and getattr(cfg, f.name) != f.default
    ]
