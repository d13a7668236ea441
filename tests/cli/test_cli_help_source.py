"""Every flag's and argument's help of the commands generated from their configs is a field
docstring of the command's config (reST literals shown as `code`) or the help of a shared alias
(``ddai_cli/common.py``, ``ddai_cli/options.py``): no help is written in the command's module."""

from __future__ import annotations

import ast
import importlib
import inspect
import typing

import pytest

from ddai.cli import app, common, options, running
from ddai.cli.app import load_command
from ddai.cli.demo import DemoConfig
from ddai.cli.fields import field_docs
from ddai.cli.flags import config_flags
from ddai.pipelines.backends.check import CheckConfig
from ddai.pipelines.backends.rejudge import RejudgeConfig
from ddai.pipelines.fixtures.world import MakeConfig
from ddai.pipelines.ingest_config import IngestConfig
from ddai.pipelines.pages.image_corpus import CorpusBuildConfig
from ddai.pipelines.pointer.embed import EmbedConfig
from ddai.pipelines.pointer.user_set import PointerWorldConfig
from ddai.trainer.episode.config import EpisodeBackends, EpisodeConfig, RewardOverrides
from ddai.trainer.episode.evaluate import EvalConfig
from ddai.trainer.pointer import config as pointer
from ddai.trainer.tiny import TinyBuildConfig


def _alias_helps() -> set[str]:
    """The helps of the ``Annotated`` flag aliases shared by many commands, and of the
    ``--progress/--no-progress`` the app gives every command that draws no bars."""
    helps = {app.NO_BARS_HELP}
    for module in (common, options):
        for value in vars(module).values():
            for meta in getattr(value, "__metadata__", ()):
                if getattr(meta, "help", None):
                    helps.add(meta.help)
    return helps


COMMANDS: dict[tuple[str, ...], tuple[str, tuple[type, ...]]] = {
    ("corpus", "build"): ("corpus", (CorpusBuildConfig,)),
    ("model", "tiny"): ("model", (TinyBuildConfig,)),
    ("fixtures", "make"): ("fixtures", (MakeConfig,)),
    ("demo",): ("demo", (DemoConfig,)),
    ("backends", "check"): ("backends", (CheckConfig,)),
    ("judge",): ("backends", (RejudgeConfig, CheckConfig)),
    ("ingest",): ("ingest", (IngestConfig,)),
    ("eval",): ("eval", (EvalConfig, EpisodeConfig, RewardOverrides, EpisodeBackends)),
    ("pointer", "world"): ("pointer", (PointerWorldConfig,)),
    ("pointer", "embed"): ("pointer", (EmbedConfig,)),
    ("pointer", "gen"): ("pointer", (pointer.GenConfig, pointer.ProposalConfig)),
    ("pointer", "process"): ("pointer", (pointer.ProcessConfig, pointer.RewardConfig)),
    ("pointer", "train"): (
        "pointer",
        (pointer.PointerTrainConfig, pointer.TrainSchedule, pointer.RLConfig),
    ),
    ("pointer", "eval"): ("pointer", (pointer.EvalConfig,)),
}
"""Each converted command: the module under ``ddai.cli`` that declares it, the configs its flags
read."""
SHARED_GROUPS: dict[tuple[str, ...], tuple[typing.Any, ...]] = {
    ("eval",): (config_flags(EvalConfig, options.PREFLIGHT),),
    ("pointer", "train"): (running.device_options,),
}
"""Shared groups (``ddai_cli/options.py``, ``running.py``) a command takes whole (their helps
written there once)."""


def _group_helps(path: tuple[str, ...]) -> set[str]:
    helps = set()
    for group in SHARED_GROUPS.get(path, ()):
        for param in inspect.signature(group).parameters.values():
            for meta in getattr(param.annotation, "__metadata__", ()):
                helps.add(meta.help)
    return helps


def _written_helps(module_name: str) -> list[int]:
    """Lines of ``module_name`` where a ``typer.Option`` or ``typer.Argument`` is given a help."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module_name)))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("Option", "Argument")
        and any(k.arg == "help" for k in node.keywords)
    ]


def _command(path: tuple[str, ...]) -> typing.Any:
    command = load_command(path[0])
    for word in path[1:]:
        command = command.commands[word]
    return command


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_param_help_is_a_config_field_docstring_or_a_shared_alias(path):
    module, configs = COMMANDS[path]
    docs = {text.replace("``", "`") for cfg in configs for text in field_docs(cfg).values()}
    allowed = docs | _alias_helps() | _group_helps(path)
    params = [p for p in _command(path).params if p.name != "help"]
    assert params
    stray = {
        p.name: getattr(p, "help", None) for p in params if getattr(p, "help", None) not in allowed
    }
    assert stray == {}
    assert _written_helps(f"ddai.cli.{module}") == []


def test_the_check_names_a_help_written_in_the_command():
    """The check above can fail: a flag whose help is no config's docstring is named."""
    command = _command(("corpus", "build"))
    docs = {t.replace("``", "`") for t in field_docs(CorpusBuildConfig).values()}
    out = next(p for p in command.params if p.name == "out")
    assert out.help in docs
    assert "Written by hand." not in docs | _alias_helps()


def test_input_format_help_lists_every_format():
    """``--input-format``'s help is ``IngestConfig.fmt``'s docstring, written out: it must list
    the adapters' registry (a format added there fails here until the docstring names it)."""
    from ddai.pipelines import adapters
    from ddai.pipelines.ingest_config import IngestConfig

    assert field_docs(IngestConfig)["fmt"].endswith(f"One of: {', '.join(adapters.formats())}.")


def test_pointer_world_help_says_the_worlds_pool_size():
    """``--demos``'s docstring writes the synthetic world's default pool size out."""
    from ddai.pipelines.pointer.world import WorldConfig

    assert f"(default {WorldConfig.n_demos};" in field_docs(PointerWorldConfig)["n_demos"]


def test_metric_help_lists_every_scorer():
    from ddai.pipelines.pointer.vqa import SCORERS

    assert field_docs(pointer.VqaStep)["metric"].startswith(f"Answer score: {', '.join(SCORERS)} (")
