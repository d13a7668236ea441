"""Flags read from config dataclasses (``ddai.cli.fields``): help from a field's docstring,
configs built from a command's flags, and the commands that use them."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from ddai.cli.fields import attributes_section, field_docs, field_help, field_opt, flags_config


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


@dataclasses.dataclass
class Documented:
    """A config documented in its class docstring.

    Attributes:
        logs: the log
            store folder.
        host, port: where to listen.
        runs: run ids; None reads every run.

    Something after the section: not a field's text.
    """

    logs: str = "x"
    host: str = "h"
    port: int = 1
    runs: list | None = None
    """The attribute docstring wins over the section."""


def test_field_docs_read_the_attributes_section():
    assert field_docs(Documented) == {
        "logs": "the log store folder.",  # a continuation line folded in
        "host": "where to listen.",  # one entry, two fields
        "port": "where to listen.",
        "runs": "The attribute docstring wins over the section.",
    }
    assert attributes_section(Documented.__doc__)["runs"] == "run ids; None reads every run."
    assert attributes_section("No section here.\n\n    logs: not an entry") == {}


def test_field_opt_becomes_the_flag_with_its_help():
    app = typer.Typer(add_completion=False, rich_markup_mode=None)

    @app.command()
    def run(
        steps: Annotated[int, field_opt(Child, "steps")] = 20,
        lr: Annotated[float, field_opt(Base, "lr", "--rate")] = 1e-3,
    ) -> None:
        typer.echo(f"{steps} {lr}")

    res = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert "--steps" in res.output and "Steps of the child" in res.output
    assert "--rate" in res.output and "Learning rate." in res.output
    assert CliRunner().invoke(app, ["--steps", "3", "--rate", "0.5"]).output == "3 0.5\n"


def test_flags_config_fills_fields_from_flags_and_given_wins():
    flags = {"name": "r", "lr": 0.5, "steps": 3, "as_json": True}  # as_json: not a field
    cfg = flags_config(Child, flags, steps=4)
    assert (cfg.name, cfg.lr, cfg.steps, cfg.quiet) == ("r", 0.5, 4, False)
    with pytest.raises(TypeError, match="no field"):
        flags_config(Child, flags, nmae="x")


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
    from ddai.cli.flags import config_flags, with_groups

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
