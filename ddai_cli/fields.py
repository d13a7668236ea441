"""Flags read from a config dataclass: a field's docstring is its flag's help (``field_help``,
``field_opt``) and its default the flag's default (``ddai.cli.options.default_of``), so the
library's config is the single source of both. A field's docstring is the string right below it,
or its entry in the class docstring's ``Attributes:`` section (``ReportConfig``'s style)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import re
import sys
import textwrap
from typing import Any, TypeVar

import typer

T = TypeVar("T")


# ``name: text`` or ``a, b: text`` (one text for several fields), an entry of ``Attributes:``
_ENTRY = re.compile(r"(\w+(?:, \w+)*): (.*)")


def attributes_section(doc: str | None) -> dict[str, str]:
    """``field -> text`` of a Google-style ``Attributes:`` section in a class docstring: an entry
    starts ``name: text`` at the section's indent, more-indented lines continue it, and the first
    line back at the docstring's own indent ends the section. Whitespace folded to one line."""
    lines = inspect.cleandoc(doc or "").splitlines()
    if "Attributes:" not in lines:
        return {}
    parts: dict[str, list[str]] = {}
    indent: int | None = None
    current: list[str] | None = None
    for line in lines[lines.index("Attributes:") + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        entry = _ENTRY.fullmatch(line.strip())
        if depth == 0 or depth < indent:
            break
        if depth == indent and entry:
            current = [entry[2]]
            for name in entry[1].split(", "):
                parts[name] = current  # names of one entry share its text
        elif depth > indent and current is not None:
            current.append(line.strip())
        else:
            break
    return {name: " ".join(" ".join(text).split()) for name, text in parts.items()}


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
    field's annotation (the attribute-docstring convention), else the field's entry in the class
    docstring's ``Attributes:`` section; whitespace folded to one line."""
    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):  # a subclass's docstring wins over its base's
        if not dataclasses.is_dataclass(cls):
            continue
        names = {f.name for f in dataclasses.fields(cls)}
        section = attributes_section(cls.__dict__.get("__doc__"))
        docs.update({k: v for k, v in section.items() if k in names})
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


def field_opt(config_cls: type, name: str, *decls: str, **kwargs: Any) -> Any:
    """``typer.Option(*decls, help=<the field's docstring>, **kwargs)`` for an ``Annotated``
    parameter (its default is the parameter's: ``default_of``); ``decls`` default to
    ``--<name with dashes>``."""
    return typer.Option(
        *(decls or (f"--{name.replace('_', '-')}",)), help=field_help(config_cls, name), **kwargs
    )


def flags_config(config_cls: type[T], flags: dict[str, Any], **given: Any) -> T:
    """``config_cls`` built from a command's flags: each parameter named like a field fills it
    (``flags`` is the command's ``locals()``), ``given`` fills fields whose flag needs parsing
    first; fields without a flag keep their default. The command stays one call long, and a
    parameter cannot be passed to the wrong field."""
    names = {f.name for f in dataclasses.fields(config_cls) if f.init}
    unknown = set(given) - names
    if unknown:
        raise TypeError(f"{config_cls.__name__} has no field(s) {sorted(unknown)}")
    kwargs = {k: v for k, v in flags.items() if k in names}
    return config_cls(**{**kwargs, **given})
