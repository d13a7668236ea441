"""The training and value commands are generated from their configs: every flag's help is the
docstring of the config field it fills (``config_flags``: reST ``x`` shown as `x`), or the help of
one of the shared aliases written once in ``ddai_cli/common.py`` / ``running.py``."""

from __future__ import annotations

import importlib
import typing

import pytest

from ddai.cli.app import load_command
from ddai.cli.fields import field_docs

NESTED = [
    "ddai.trainer.episode.config:EpisodeConfig",
    "ddai.trainer.episode.config:RewardOverrides",
    "ddai.trainer.episode.config:EpisodeBackends",
]
LAUNCH = ["ddai.trainer.run_settings:LaunchSettings"]
COMMANDS = [
    (("train", "sft"), ["ddai.trainer.sft.config:SFTRunConfig", *LAUNCH]),
    (("train", "grpo"), ["ddai.trainer.grpo.config:GRPORunConfig", *NESTED, *LAUNCH]),
    (("train", "ppo"), ["ddai.trainer.ppo.config:PPORunConfig", *NESTED, *LAUNCH]),
    (("collect",), ["ddai.trainer.episode.collect:CollectConfig", *NESTED]),
    (("train", "value"), ["ddai.trainer.value.config:ValueTrainConfig", *LAUNCH]),
    (("train", "value-sft"), ["ddai.trainer.value.config:ValueSFTConfig", *LAUNCH]),
    (("value", "score"), ["ddai.trainer.value.config:ValueScoreConfig"]),
]


def _cls(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def _alias_helps() -> set[str]:
    """The help of every shared ``Annotated`` flag alias (written once, in its module)."""
    import ddai.cli.common as common
    import ddai.cli.running as running

    helps = set()
    for module in (common, running):
        for value in vars(module).values():
            for meta in typing.get_args(value)[1:] if typing.get_origin(value) else ():
                if getattr(meta, "help", None):
                    helps.add(meta.help)
    return helps


def _command(path: tuple[str, ...]):
    cmd = load_command(path[0])
    for part in path[1:]:
        cmd = cmd.commands[part]
    return cmd


@pytest.mark.parametrize(("path", "specs"), COMMANDS, ids=["-".join(p) for p, _ in COMMANDS])
def test_every_flag_help_is_its_config_field_docstring_or_a_shared_alias(path, specs):
    docs: dict[str, str] = {}
    for spec in reversed(specs):  # the run config's own docstring wins over a nested one
        docs |= {k: v.replace("``", "`") for k, v in field_docs(_cls(spec)).items()}
    aliases = _alias_helps()
    wrong, from_fields = [], 0
    for p in _command(path).params:
        if p.name in docs and p.help == docs[p.name]:
            from_fields += 1
        elif p.help not in aliases:
            wrong.append(f"{p.opts[0]}: {p.help!r}")
    assert wrong == []
    assert from_fields >= 10  # the command's own flags came from its configs


def test_the_check_sees_a_help_written_in_the_command():
    # the control: a flag whose help is written by hand, not read from a docstring
    import typer

    app = typer.Typer(add_completion=False)

    @app.command()
    def run(max_turns: int = typer.Option(7, help="Turns per episode.")) -> None:
        del max_turns

    (param,) = typer.main.get_command(app).params
    docs = field_docs(_cls(NESTED[0]))
    assert param.help != docs["max_turns"] and param.help not in _alias_helps()


@pytest.mark.parametrize("name", ["train", "value"])
def test_sub_app_groups_take_their_help_from_the_registry(name, monkeypatch):
    # a group's help is its registry line (one text for `ddai --help` and `ddai NAME --help`):
    # change the line and the loaded group says the new text
    from ddai.cli.app import COMMANDS, Entry

    monkeypatch.setitem(COMMANDS, name, Entry(COMMANDS[name].modules, "Help from the registry."))
    assert load_command(name).help == "Help from the registry."
