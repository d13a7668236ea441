"""Flags read from a config dataclass: a field's docstring is its flag's help (``field_help``,
``field_opt``) and its default the flag's default (``ddai.cli.options.default_of``), so the
library's config is the single source of both."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
from typing import Any, TypeVar

import typer

T = TypeVar("T")


@functools.cache
def field_docs(config_cls: type) -> dict[str, str]:
    """``field -> docstring`` of a dataclass and its bases: the string literal right below a
    field's annotation (the attribute-docstring convention), whitespace folded to one line."""
    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):  # a subclass's docstring wins over its base's
        if not dataclasses.is_dataclass(cls):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, after in itertools.pairwise(body):
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
