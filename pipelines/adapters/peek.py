"""Cheap looks at the start of a file, for format sniffers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PEEK_BYTES = 1 << 22


def first_object(path: Path) -> dict[str, Any] | None:
    """The first non-blank line of a JSONL file as an object, else None (never raises)."""
    try:
        with open(path, "rb") as fh:
            for _ in range(64):
                line = fh.readline(PEEK_BYTES)
                if not line:
                    return None
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else None
    except (OSError, ValueError):
        return None
    return None


def head_text(path: Path, n: int = 4096) -> str:
    """The first ``n`` bytes of a file as text (undecodable bytes replaced)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n).decode("utf-8", errors="replace")
    except OSError:
        return ""
