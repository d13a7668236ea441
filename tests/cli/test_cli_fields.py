"""Flags read from config dataclasses (``ddai.cli.fields``, ``ddai.cli.flags``): help from a
field's docstring, short names and parsed text, and the commands that use them."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from typer.testing import CliRunner

from ddai.cli.fields import field_docs, field_help
from ddai.cli.flags import config_flags, with_groups


@dataclasses.dataclass(kw_only=True)
class Base:
    lr: float = 1e-3
    """Learning
    rate."""
    steps: int = 10
    """Optimizer steps."""
    quiet: bool = False  # a comment is not help


@dataclasses.dataclass
class Child(Base):
    name: str
    """The run's name."""
    steps: int = dataclasses.field(default=20, kw_only=True)
    """Steps of the child (more: why it differs)."""


def test_field_docs_read_docstrings_through_the_bases_and_the_override_wins():
    docs = field_docs(Child)
    assert docs == {
        "lr": "Learning rate.",  # whitespace folded
        "steps": "Steps of the child (more: why it differs).",
        "name": "The run's name.",
    }
    assert field_help(Base, "steps") == "Optimizer steps."
    with pytest.raises(KeyError, match=r"Base\.quiet has no docstring"):
        field_help(Base, "quiet")


def test_field_docs_of_classes_made_in_functions_come_from_the_module_parse():
    """A config made in a function (here, in its method too) is found by its qualified name
    (``f.<locals>.Cfg``) in the one parse of its module."""

    @dataclasses.dataclass
    class Local:
        depth: int = 2
        """How
        deep."""

        def inner(self) -> type:
            @dataclasses.dataclass
            class Nested:
                width: int = 1
                """How wide."""

            return Nested

    assert field_docs(Local) == {"depth": "How deep."}
    assert field_docs(Local().inner()) == {"width": "How wide."}


def test_value_flags_show_the_config_field_docs():
    from ddai.cli.app import app
    from ddai.trainer.value.config import ValueSFTConfig, ValueTrainConfig

    runner = CliRunner()
    out = runner.invoke(app, ["train", "value", "--help"], terminal_width=400).output
    assert field_help(ValueTrainConfig, "unfreeze") in " ".join(out.split())
    out = runner.invoke(app, ["train", "value-sft", "--help"], terminal_width=400).output
    shown = field_help(ValueSFTConfig, "seed").replace("``", "`")  # reST literals as `code`
    assert shown in " ".join(out.split())


def test_config_flags_make_positional_arguments_with_the_field_docstring():
    app = typer.Typer(rich_markup_mode=None)

    @app.command()
    @with_groups(
        {"cfg": config_flags(Child, {"name": {"argument": True, "metavar": "NAME"}, "lr": None})}
    )
    def cmd(*, cfg: dict) -> None:
        print(Child(**cfg))

    runner = CliRunner()
    out = runner.invoke(app, ["run7", "--lr", "0.5"])
    assert out.exit_code == 0, out.output
    assert "Child(lr=0.5, steps=20, quiet=False, name='run7')" in out.output
    assert runner.invoke(app, []).exit_code == 2  # a field without a default is required
    helped = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "NAME" in helped and "The run's name." in helped and "Learning rate." in helped


def _parse_pairs(texts: list[str]) -> tuple[tuple[str, float], ...]:
    pairs = [t.partition("=") for t in texts]
    if any(not sep for _, sep, _ in pairs):
        raise ValueError(f"--pair {texts!r}: write NAME=NUMBER")
    return tuple((name, float(v)) for name, _, v in pairs)


@dataclasses.dataclass
class Parsed:
    out: str
    """Where to write."""
    pairs: tuple[tuple[str, float], ...] = ()
    """Named numbers."""


def test_config_flags_take_short_names_and_parse_text_into_the_field():
    # ``-o`` beside ``--out`` (a tuple declaration); ``--pair`` text parsed into the field's tuple
    flags = config_flags(
        Parsed,
        {
            "out": ("--out", "-o"),
            "pairs": {"decl": "--pair", "type": list[str], "default": [], "parse": _parse_pairs},
        },
    )
    seen = []
    app = typer.Typer(rich_markup_mode=None)

    @app.command()
    @with_groups({"cfg": flags})
    def cmd(*, cfg: dict) -> None:
        seen.append(Parsed(**cfg))

    runner = CliRunner()
    res = runner.invoke(app, ["-o", "f.csv", "--pair", "a=1", "--pair", "b=2.5"])
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["--out", "g.csv"]).exit_code == 0
    assert seen == [Parsed("f.csv", (("a", 1.0), ("b", 2.5))), Parsed("g.csv", ())]
    bad = runner.invoke(app, ["-o", "f.csv", "--pair", "a"])
    assert bad.exit_code == 2 and "write NAME=NUMBER" in bad.output  # parse's ValueError
    assert len(seen) == 2  # the command did not run
    helped = " ".join(runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output.split())
    assert "-o, --out" in helped and "Where to write." in helped and "Named numbers." in helped
