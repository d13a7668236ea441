"""Typer signatures built from config dataclasses: ``config_flags`` turns a config's fields into
a group of flags (type and default from the field, help from its docstring: ``fields.field_docs``),
``with_groups`` puts groups of flags into a command's signature and hands the command what each
group builds. The training commands' groups are declared in ``ddai_cli/options.py``, which
re-exports ``default_of``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from ddai.cli.common import bad_input_exits
from ddai.cli.fields import field_help

F = TypeVar("F", bound=Callable[..., Any])


def default_of(config_cls: type, name: str) -> Any:
    """The default of ``config_cls``'s field ``name`` (a dataclass), for a flag's default."""
    for f in dataclasses.fields(config_cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{config_cls.__name__} has no field {name!r} with a default")


def config_flags(config_cls: type, flags: dict[str, str | dict[str, Any] | None]) -> Callable:
    """A group builder (for ``with_groups``) whose parameters are ``config_cls``'s fields named in
    ``flags``: each flag's type and default are the field's, its help the field's docstring.
    ``flags[field]``: None (``--field-name``), the flag's declaration (``"--lr"``,
    ``"--whiten/--no-whiten"``, or a tuple with short names: ``("--out", "-o")``), or
    ``typer.Option`` keywords (``{"min": 1}``, with ``"decl"`` for the declaration and ``"help"``
    for a help shared by several configs, shown as given); ``{"argument": True, ...}`` makes the
    field a positional ``typer.Argument`` (the other keys are its keywords: ``metavar``).
    ``"type"`` and ``"default"`` give the flag its own type and default where the text it takes
    is not the field's value, and ``"parse"`` turns that text into the field's value (a
    ``ValueError`` exits 2 with its message): ``--temps 0.7,1`` into ``(0.7, 1.0)``. A field
    without a default is a required flag (argument). The builder returns ``{field: value}`` to
    pass on to ``config_cls``."""
    hints = typing.get_type_hints(config_cls)
    params = []
    parsers: dict[str, Callable[[Any], Any]] = {}
    for name, spec in flags.items():
        if name not in hints:
            raise KeyError(f"{config_cls.__name__} has no field {name!r}")
        opts = dict(spec) if isinstance(spec, dict) else {"decl": spec}
        argument = opts.pop("argument", False)
        decl = opts.pop("decl", None) or f"--{name.replace('_', '-')}"
        decls = (decl,) if isinstance(decl, str) else tuple(decl)
        if "parse" in opts:
            parsers[name] = opts.pop("parse")
        help_text = opts.pop("help", None)
        if help_text is None:  # reST literals shown as `code`
            help_text = field_help(config_cls, name).replace("``", "`")
        annotation = opts.pop("type", hints[name])
        default = opts.pop("default", inspect.Parameter.empty)
        option = (
            typer.Argument(help=help_text, **opts)
            if argument
            else typer.Option(*decls, help=help_text, **opts)
        )
        if default is inspect.Parameter.empty:
            with contextlib.suppress(KeyError):  # no default in the config: a required flag
                default = default_of(config_cls, name)
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[annotation, option],
            )
        )

    def build(**values: Any) -> dict[str, Any]:
        with bad_input_exits():
            return values | {name: parse(values[name]) for name, parse in parsers.items()}

    build.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    build.__annotations__ = {p.name: p.annotation for p in params}
    build.__parsers__ = parsers  # type: ignore[attr-defined]
    return build


def with_groups(groups: dict[str, Callable[..., Any]]) -> Callable[[F], F]:
    """Decorate a command whose parameters named as ``groups``' keys take built group objects:
    Typer sees each group's flags in that parameter's place (and of its kind: the groups are the
    command's keyword-only parameters), and the command gets ``group(**its flags)``. The
    command's own source keeps its ``Config(field=param, **group)`` call (the defaults test reads
    it through ``__wrapped__``, each group's flags through ``__groups__`` and the flags whose
    text is parsed through ``__parsers__``)."""

    def decorate(command: F) -> F:
        sig = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        owned: dict[str, list[str]] = {}
        parsers: dict[str, Callable[[Any], Any]] = {}
        for p in sig.parameters.values():
            if p.name not in groups:
                params.append(p)
                continue
            flags = inspect.signature(groups[p.name], eval_str=True).parameters.values()
            owned[p.name] = [f.name for f in flags]
            parsers |= getattr(groups[p.name], "__parsers__", {})
            params += [f.replace(kind=p.kind) for f in flags]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            for name, names in owned.items():
                kwargs[name] = groups[name](**{n: kwargs.pop(n) for n in names})
            return command(**kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        wrapper.__groups__ = owned  # type: ignore[attr-defined]
        wrapper.__parsers__ = parsers  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
