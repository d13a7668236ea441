"""Prompt templates: text files with a ``[system]`` and a ``[user]`` section, rendered by jinja2.

```
# comment lines before the first section are notes, not prompt
[system]
You grade answers.
[user]
Question: {{ question }}
```

The defaults ship in ``ddai/pipelines/prompts/<role>.txt``; a backend's ``prompt = "path"`` (or
``prompts.<role>``) replaces one. A template's ``sha256`` covers the two sections exactly as sent,
and is part of every cache key: editing a prompt starts a fresh cache, editing a comment does not.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ddai.pipelines.records.lazy import lazy_module

jinja2 = lazy_module("jinja2")

_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False
)
_SECTIONS = ("[system]", "[user]")


@lru_cache(maxsize=256)
def _compile(source: str) -> jinja2.Template:
    return _ENV.from_string(source)


@dataclass(frozen=True)
class Rendered:
    system: str
    user: str


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    system: str
    user: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(f"{self.system}\0{self.user}".encode()).hexdigest()

    def render(self, **variables: Any) -> Rendered:
        try:
            return Rendered(
                _compile(self.system).render(**variables).strip(),
                _compile(self.user).render(**variables).strip(),
            )
        except jinja2.UndefinedError as e:
            raise ValueError(
                f"prompt {self.name}: {e}; the template may only use: {', '.join(sorted(variables))}"
            ) from e


def parse(text: str, name: str = "<prompt>") -> PromptTemplate:
    """Split a prompt file into its sections; a file without ``[user]`` is refused."""
    parts: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        tag = line.strip().lower()
        if tag in _SECTIONS:
            current = tag
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise ValueError(f"prompt {name}: text before the first [system]/[user] line: {line!r}")
    if "[user]" not in parts:
        raise ValueError(
            f"prompt {name}: no [user] section; start the user message with a `[user]` line"
        )
    system = "\n".join(parts.get("[system]", [])).strip()
    user = "\n".join(parts["[user]"]).strip()
    return PromptTemplate(name=name, system=system, user=user)


def load(role: str, path: str | os.PathLike[str] | None = None) -> PromptTemplate:
    """The prompt for ``role``: the file at ``path``, else the packaged default."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(
                f"prompt file {p} does not exist (set `prompt` to a readable file)"
            )
        return parse(p.read_text(encoding="utf-8"), name=str(p))
    res = resources.files("ddai.pipelines").joinpath("prompts", f"{role}.txt")
    return parse(res.read_text(encoding="utf-8"), name=f"{role}.txt")
