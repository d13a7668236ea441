"""A config field's docstring is its flag's help (``field_docs``, ``field_help``; the flags are
built by ``ddai.cli.flags.config_flags``, whose defaults are the fields' own), so the library's
config is the single source of both. A field's docstring is the string right below it."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import sys
import textwrap


@functools.cache
def _module_classes(filename: str) -> dict[str, ast.ClassDef]:
    """Every class of a module's source by its qualified name, from one parse of the file (what
    ``inspect.getsource`` would do once per class, with a tokenizer pass on top: ~40 ms of
    ``ddai train grpo --help``)."""
    with open(filename, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename)
    classes: dict[str, ast.ClassDef] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                classes[prefix + node.name] = node
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return classes


def _class_node(cls: type) -> ast.ClassDef:
    """``cls``'s definition in its module's source."""
    filename = getattr(sys.modules.get(cls.__module__), "__file__", None)
    node = _module_classes(filename).get(cls.__qualname__) if filename else None
    if node is None:  # a class made in a function (tests): its own source
        node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(node, ast.ClassDef), cls
    return node


@functools.cache
def field_docs(config_cls: type) -> dict[str, str]:
    """``field -> docstring`` of a dataclass and its bases: the string literal right below a
    field's annotation (the attribute-docstring convention); whitespace folded to one line."""
    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):  # a subclass's docstring wins over its base's
        if not dataclasses.is_dataclass(cls):
            continue
        for node, after in itertools.pairwise(_class_node(cls).body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def field_help(config_cls: type, name: str) -> str:
    """The docstring of ``config_cls``'s field ``name``; a field without one is a bug here."""
    try:
        return field_docs(config_cls)[name]
    except KeyError:
        raise KeyError(f"{config_cls.__name__}.{name} has no docstring to use as help") from None
