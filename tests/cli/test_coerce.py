"""Flag values converted without pydantic give exactly what Typer's own (pydantic) path gives:
the same value of the same type, or the same error message."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
import typer
import typer.main
from typer._click import Context
from typer._coercion import build_runtime_param
from typer.testing import CliRunner

from ddai.cli import coerce
from ddai.cli.app import app


class Color(enum.StrEnum):
    red = "red"
    dark_blue = "dark-blue"


def _command() -> Any:
    demo = typer.Typer()

    @demo.command()
    def cmd(
        s: Annotated[str, typer.Option()] = "",
        i: Annotated[int, typer.Option()] = 0,
        f: Annotated[float, typer.Option()] = 0.0,
        p: Annotated[Path | None, typer.Option()] = None,
        must: Annotated[Path | None, typer.Option(exists=True, dir_okay=False)] = None,
        c: Annotated[Color, typer.Option()] = Color.red,
        lit: Annotated[Literal["a", "b"], typer.Option()] = "a",
        ss: Annotated[list[str] | None, typer.Option()] = None,
        ii: Annotated[list[int] | None, typer.Option()] = None,
        b: Annotated[bool, typer.Option()] = False,
        bi: Annotated[int | None, typer.Option(min=1)] = None,
        bf: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.5,
    ) -> None:
        pass

    return typer.main.get_command(demo)


COMMAND = _command()
PARAMS = {p.name: p for p in COMMAND.params}

CASES = [
    ("s", ["abc", "", "  x ", "ümlaut", Color.red, 5]),
    ("i", ["0", "5", "-3", "007", "1e3", " 5", "5_000", "+4", "abc", "", 7, 5.0, True]),
    ("f", ["0.25", "-1.5", "3", "1e3", "inf", "nan", "1.", ".5", "abc", 3, 2.5, True]),
    ("p", ["a/b", "", "-", "~/x", Path("x")]),
    ("must", ["no/such/file", "."]),
    ("c", ["red", "dark-blue", "RED", "blue", Color.dark_blue]),
    ("lit", ["a", "b", "c"]),
    ("ss", [("a", "b"), ["x"], "one"]),
    ("ii", [("1", "2"), ("1", "x"), ("007",)]),
    ("b", [True, False, "true", "no"]),
    ("bi", ["1", "0", "-1", "2", "007", 3, 0]),
    ("bf", ["0", "1", "0.5", "1.5", "-0.25", "1e-3", 0.0, 2.0]),
]


def _convert(runtime: Any, name: str, value: Any) -> tuple[str, Any]:
    param = PARAMS[name]
    ctx = Context(COMMAND)
    try:
        out = runtime._coerce_value(value, param=param, ctx=ctx)
    except Exception as e:  # the error a user would read
        return "error", (type(e).__name__, str(getattr(e, "message", e)))
    # repr: NaN equals no value, its repr does
    return "value", (
        type(out),
        [type(x) for x in out] if isinstance(out, list) else None,
        repr(out),
    )


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in CASES for v in vs])
def test_fast_conversion_matches_typers_own(name, value):
    param = PARAMS[name]
    fast = coerce.fast_runtime_param(param)
    assert fast is not None, f"{name}: no fast converter"
    typer_own = build_runtime_param(param.type_descriptor)
    assert _convert(fast, name, value) == _convert(typer_own, name, value)


def test_plain_values_take_the_fast_path(monkeypatch):
    """The common values never reach Typer's adapter (which would import pydantic)."""

    def refuse(descriptor: Any) -> Any:
        raise AssertionError(f"fell back to Typer's adapter for {descriptor.annotation}")

    monkeypatch.setattr(coerce, "build_runtime_param", refuse)
    for name, value, want in [
        ("s", "abc", "abc"),
        ("i", "-12", -12),
        ("f", "0.25", 0.25),
        ("p", "a/b", Path("a/b")),
        ("c", "dark-blue", Color.dark_blue),
        ("lit", "b", "b"),
        ("ss", ("a", "b"), ["a", "b"]),
        ("ii", ("1", "2"), [1, 2]),
        ("b", True, True),
        ("bi", "4", 4),
        ("bf", "0.25", 0.25),
    ]:
        out = coerce.fast_runtime_param(PARAMS[name])._coerce_value(
            value, param=PARAMS[name], ctx=Context(COMMAND)
        )
        assert out == want and type(out) is type(want), name


def test_types_without_a_fast_converter_keep_typers():
    demo = typer.Typer()

    @demo.command()
    def cmd(
        bounded: Annotated[int, typer.Option(min=1, clamp=True)] = 1,
        parsed: Annotated[int, typer.Option(parser=int)] = 1,
        pair: Annotated[tuple[int, int], typer.Option()] = (1, 2),
    ) -> None:
        pass

    params = [
        p for p in typer.main.get_command(demo).params if p.name in ("bounded", "parsed", "pair")
    ]
    assert len(params) == 3
    for param in params:
        assert coerce.fast_runtime_param(param) is None, param.name


def test_ddai_commands_convert_through_the_fast_path(tmp_path):
    """``ddai.cli.app`` installs the hook: a real command's flags get ``FastParam``s."""
    group = typer.main.get_command(app)
    res = CliRunner().invoke(app, ["runs", "--logs", str(tmp_path / "none")])
    assert res.exit_code == 2  # no such store
    runs = group.commands["runs"]
    logs = next(p for p in runs.params if p.name == "logs")
    assert isinstance(logs.get_runtime_param(), coerce.FastParam)
