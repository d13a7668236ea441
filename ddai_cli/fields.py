"""A config field's docstring is its flag's help (``field_docs``, ``field_help``; the flags are
built by ``ddai.cli.flags.config_flags``, whose defaults are the fields' own), so the library's
config is the single source of both. A field's docstring is the string right below it.

Reading them parses the config's module source (``ast``); every ``--help`` did that for each
config module it showed (10-30 ms). The docstrings of a module are therefore kept beside its
bytecode (``_cache_path``: ``__pycache__/<module>.<tag>.fielddocs.json``, or under
``sys.pycache_prefix``), keyed like a ``.pyc`` by the source's modification time and size: a
stale, unreadable or foreign file is ignored and rewritten (atomically; not at all when Python
writes no bytecode or the folder is read-only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import itertools
import json
import os
import sys
from typing import Any

CACHE_FORMAT = 2
"""Bumped when what ``_parse_docs`` keeps changes: a cache of another format is ignored."""


def _fold(text: str) -> str:
    return " ".join(text.split())


def _class_docs(body: list[Any]) -> dict[str, str]:
    """``field -> docstring`` of one class body's own fields (``ast`` nodes): the string literal
    right below an annotated name; whitespace folded to one line."""
    import ast

    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = _fold(after.value.value)
    return docs


def _parse_docs(source: str, filename: str) -> dict[str, dict[str, str]]:
    """Every class of a module's source by its qualified name (``f.<locals>.Cfg`` for one made in
    a function), with its own fields' docstrings, from one parse of the file (what
    ``inspect.getsource`` would do once per class, with a tokenizer pass on top)."""
    import ast

    classes: dict[str, dict[str, str]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                classes[prefix + node.name] = _class_docs(node.body)
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, f"{prefix}{node.name}.<locals>.")

    walk(ast.parse(source, filename).body, "")
    return classes


def _cache_path(filename: str) -> str | None:
    """Where ``filename``'s docstrings are kept: next to its bytecode (None: Python keeps none)."""
    try:
        pyc = importlib.util.cache_from_source(filename)
    except (NotImplementedError, ValueError):  # no cache tag, or not a .py source
        return None
    return pyc.removesuffix(".pyc") + ".fielddocs.json"


def _read_cache(path: str, key: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != key:
        return None
    classes = kept.get("classes")
    return classes if isinstance(classes, dict) else None


def _write_cache(path: str, key: dict[str, Any], classes: dict[str, dict[str, str]]) -> None:
    """Written to a temporary name then renamed: a reader sees the old file or the whole new
    one. Any failure (read-only install, full disk) leaves the parse uncached."""
    if sys.dont_write_bytecode:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"key": key, "classes": classes}, fh)
        os.replace(tmp, path)
    except OSError:  # nothing to report: the next run parses again
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@functools.cache
def _module_docs(filename: str) -> dict[str, dict[str, str]]:
    """Every class of the module at ``filename`` by qualified name → its own fields' docstrings:
    from the cache when it matches the source's modification time and size, else parsed (and
    kept)."""
    st = os.stat(filename)
    key = {
        "format": CACHE_FORMAT,
        "source": filename,
        "mtime_ns": st.st_mtime_ns,
        "size": st.st_size,
    }
    path = _cache_path(filename)
    if path is not None and (kept := _read_cache(path, key)) is not None:
        return kept
    with open(filename, encoding="utf-8") as fh:
        classes = _parse_docs(fh.read(), filename)
    if path is not None:
        _write_cache(path, key, classes)
    return classes


def _own_docs(cls: type) -> dict[str, str]:
    """The docstrings of ``cls``'s own fields, from its module's source."""
    filename = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return _module_docs(filename).get(cls.__qualname__, {}) if filename else {}


@functools.cache
def field_docs(config_cls: type) -> dict[str, str]:
    """``field -> docstring`` of a dataclass and its bases: the string literal right below a
    field's annotation (the attribute-docstring convention); whitespace folded to one line."""
    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):  # a subclass's docstring wins over its base's
        if dataclasses.is_dataclass(cls):
            docs.update(_own_docs(cls))
    return docs


def field_help(config_cls: type, name: str) -> str:
    """The docstring of ``config_cls``'s field ``name``; a field without one is a bug here."""
    try:
        return field_docs(config_cls)[name]
    except KeyError:
        raise KeyError(f"{config_cls.__name__}.{name} has no docstring to use as help") from None
