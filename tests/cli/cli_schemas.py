"""Check a ``--json`` summary against its schema in ``docs/schemas/`` (shared by the CLI tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
SNAKE = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*")


def check(name: str, data: dict) -> None:
    """``data`` is valid for ``docs/schemas/<name>.json`` and names no undocumented top-level key."""
    schema = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    undocumented = set(data) - set(schema["properties"])
    assert not undocumented, f"{name}: document {sorted(undocumented)} in docs/schemas/{name}.json"
    assert all(SNAKE.fullmatch(k) for k in data), [k for k in data if not SNAKE.fullmatch(k)]
