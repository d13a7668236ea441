"""Heavy libraries bound at a module's import and loaded at their first use.

``np = lazy_module("numpy")`` in place of ``import numpy as np``: the module's code reads the same,
but numpy (pyarrow, polars, duckdb: 50-150 ms each) loads only when an attribute of ``np`` is first
read. A command's ``--help`` imports the modules that define its configs and so would otherwise
load every library its run uses; with these, it loads none (``tests/cli/test_cli_app.py``).

Python 3.15's ``lazy import`` (PEP 810) is the language's own form of this; the stdlib's
``importlib.util.LazyLoader`` cannot be used here: finding a submodule's spec (``pyarrow.compute``)
imports its parent, and it puts a half-made module in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class LazyModule:
    """A stand-in for the module ``name``: imports it on the first attribute read."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded"
        return f"<lazy module {self._name!r} ({state})>"


def lazy_module(name: str) -> Any:
    """``name``'s stand-in (typed ``Any``: it reads as the module it stands for)."""
    return LazyModule(name)


def lazy_names(
    package: str, home: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package front's ``__getattr__, __dir__`` (PEP 562): ``name`` is loaded from the submodule
    ``home[name]`` at its first read, then kept as a plain attribute (so monkeypatch sees it); any
    other name raises ``AttributeError``, so ``from package import submodule`` imports as usual."""

    def __getattr__(name: str) -> Any:
        sub = home.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{sub}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return __getattr__, __dir__


class _Absent:
    """A ``sys.meta_path`` finder that makes ``names`` (and their submodules) import as if they
    were not installed: ``ModuleNotFoundError``, the error every optional import expects."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    def __repr__(self) -> str:
        return f"<absent {sorted(self.names)}>"


def run_without(*names: str) -> None:
    """For the rest of this process, import ``names`` as if they were not installed (a module
    already imported stays). For commands that never use a library that others import on their
    first call when it is there: pyarrow, plotly and DuckDB each import pandas then (0.3 s of a
    command's start), and each works as documented without it."""
    absent = frozenset(n for n in names if n not in sys.modules)
    if absent and not any(isinstance(f, _Absent) and f.names >= absent for f in sys.meta_path):
        sys.meta_path.insert(0, _Absent(absent))
