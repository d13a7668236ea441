"""Check a ``--json`` summary against its schema in ``docs/schemas/`` (shared by the CLI tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
SNAKE = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*")


def check(name: str, data: dict) -> None:
    """``data`` is valid for ``docs/schemas/<name>.json`` and names no undocumented top-level key.

    Keys are snake_case, except those a schema's ``patternProperties`` document: names built from
    the data (``<selector>/<metric>`` in ``pointer eval``), kept as written like run ids."""
    schema = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
    named = [k for k in data if not any(p.search(k) for p in patterns)]
    undocumented = set(named) - set(schema["properties"])
    assert not undocumented, f"{name}: document {sorted(undocumented)} in docs/schemas/{name}.json"
    assert all(SNAKE.fullmatch(k) for k in named), [k for k in named if not SNAKE.fullmatch(k)]
