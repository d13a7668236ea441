"""Flag values converted without pydantic: Typer's own coercion, minus its 0.1–0.25 s import.

Typer (0.2x) converts every flag value through a pydantic ``TypeAdapter``; the first flag a
command parses imports pydantic, which costs more than the rest of ``ddai runs``'s start. Most of
those adapters only wrap Typer's own plain functions (choices, paths) or ``str``/``int``/``float``
of a plain value, so ``install`` gives each Typer parameter a converter that calls
the same functions directly for the values that need nothing else:

- ``str``: a ``str`` as it is; ``Enum`` / ``Literal``: Typer's ``coerce_cli_choice``;
- ``Path``: Typer's ``coerce_cli_path`` (its existence and kind checks included);
- ``int`` / ``float``: plain decimal digits (``-12``, ``0.25``), or a value already of that type,
  within the flag's ``min``/``max`` if it has them (not ``clamp``); ``bool``: a ``bool``;
- ``list[...]`` of these, item by item.

Anything else (another type, a value such as ``1e3`` or ``007``, a ``parser=``, a value the fast
path refuses) goes through Typer's own adapter, so results and error messages stay exactly
Typer's. On a Typer without these internals ``install`` does nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:  # Typer's internals (0.2x): absent elsewhere, where Typer converts values its own way
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path, lenient_issubclass
    from typer._typing import is_literal_type, literal_values
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - another Typer
    RuntimeParam = None  # type: ignore[assignment,misc]

_DECLINE = object()  # the fast path has no answer: Typer's adapter decides
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")

Leaf = Callable[[Any, Any, Any], Any]  # (value, param, ctx) -> converted value or _DECLINE


def _exact(kind: type) -> Leaf:
    """A value of exactly ``kind``: a str subclass (a StrEnum default) becomes a plain str in
    Typer's path."""

    def leaf(value: Any, param: Any, ctx: Any) -> Any:
        return value if type(value) is kind else _DECLINE

    return leaf


def _number(kind: type[int] | type[float], digits: re.Pattern[str], low: Any, high: Any) -> Leaf:
    """A value already of ``kind``, or plain ``digits`` text converted to it, in ``[low, high]``
    (Typer's bounds are inclusive; a value outside goes to Typer's adapter, which raises its own
    message)."""

    def leaf(value: Any, param: Any, ctx: Any) -> Any:
        if type(value) is kind:
            out = value
        elif type(value) is str and digits.fullmatch(value):
            out = kind(value)
        else:
            return _DECLINE
        if (low is not None and out < low) or (high is not None and out > high):
            return _DECLINE
        return out

    return leaf


def _choice(choices: list[Any], case_sensitive: bool) -> Leaf:
    def leaf(value: Any, param: Any, ctx: Any) -> Any:
        return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)

    return leaf


def _path(path_type: type[Path], info: Any) -> Leaf:
    def leaf(value: Any, param: Any, ctx: Any) -> Any:
        if type(value) is str and value:
            value = path_type(value)  # what pydantic's Path adapter makes of a non-empty str
        if not isinstance(value, path_type):
            return _DECLINE
        return coerce_cli_path(value, info, path_type=path_type, param=param, ctx=ctx)

    return leaf


def _leaf(annotation: Any, info: Any) -> Leaf | None:
    """The fast converter of one (non-list) annotation, in the order Typer picks its adapter;
    None where Typer's adapter does more than this module repeats."""
    if info.parser is not None:
        return None
    if lenient_issubclass(annotation, Enum):
        return _choice(list(annotation), info.case_sensitive)
    if is_literal_type(annotation):
        return _choice(list(literal_values(annotation)), info.case_sensitive)
    if annotation is int or annotation is float:
        if info.clamp:
            return None
        digits = _INT if annotation is int else _FLOAT
        return _number(annotation, digits, info.min, info.max)
    if annotation is str or annotation is bool:
        return _exact(annotation)
    if lenient_issubclass(annotation, Path) and get_origin(annotation) is None:
        path_type = info.path_type or annotation
        if lenient_issubclass(path_type, Path):
            return _path(path_type, info)
    return None


def converter(annotation: Any, info: Any) -> Leaf | None:
    """The fast converter of a parameter's annotation (a leaf or ``list[leaf]``), or None."""
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        leaf = _leaf(item, info)
        if leaf is None:
            return None

        def many(value: Any, param: Any, ctx: Any) -> Any:
            items = value if isinstance(value, list | tuple) else [value]
            out = [leaf(v, param, ctx) for v in items]
            return _DECLINE if any(v is _DECLINE for v in out) else out

        return many
    return _leaf(annotation, info)


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class FastParam(RuntimeParam):
        """Typer's runtime conversion of one parameter: ``fast`` first, Typer's adapter after."""

        fast: Leaf

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                out = self.fast(value, param, ctx)
            except Exception:  # Typer's own path raises its own error for this value
                out = _DECLINE
            if out is _DECLINE:
                typer_own = build_runtime_param(param.type_descriptor)
                return typer_own._coerce_value(value, param=param, ctx=ctx)
            return out


def fast_runtime_param(param: Any) -> Any:
    """The conversion of a Typer parameter: ``FastParam`` where its annotation has a fast
    converter, else None (Typer builds its own)."""
    desc = param.type_descriptor
    if desc.file_annotation is not None:
        return None
    fast = converter(desc.annotation, desc.parameter_info)
    return None if fast is None else FastParam(desc.parameter_info, desc.annotation, fast)


def install() -> None:
    """Make every Typer parameter of this process convert its values here first.

    Typer builds a parameter's converter lazily, when the parameter first processes a value
    (even ``None``: ``--help`` and the completion flags of every command), so the hook sits on
    that lazy step of the parameter class; parameters this module has no converter for build
    Typer's own as before. Idempotent."""
    typer_own = getattr(_TyperParameter, "get_runtime_param", None) if RuntimeParam else None
    if typer_own is None or getattr(typer_own, "_ddai", False):
        return  # another Typer, or installed already

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            self._runtime_param = fast_runtime_param(self)
        return typer_own(self)

    get_runtime_param._ddai = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param
