"""The funnel and reading commands' flags are their configs: every option's and argument's help
is the docstring of the config field it fills (the field named like the parameter), or the help of
one of the shared aliases of ``ddai_cli/common.py`` (``--logs``, ``--run``, ``--json`` ...)."""

from __future__ import annotations

import inspect
import typing

import pytest
import typer

from ddai.cli import app as cli_app
from ddai.cli import common
from ddai.cli.app import app
from ddai.cli.fields import field_docs


def _alias_helps() -> set[str]:
    """The help of every ``Annotated`` option alias of ``common.py``, and the flag every command
    without progress bars accepts."""
    helps = {cli_app.NO_BARS_HELP}
    for value in vars(common).values():
        for meta in getattr(value, "__metadata__", ()):
            if getattr(meta, "help", None):
                helps.add(meta.help)
    return helps


def _configs() -> dict[tuple[str, ...], tuple[type, ...]]:
    from ddai.pipelines.analyses import AttributionConfig
    from ddai.pipelines.analyses.export import RowsOut
    from ddai.pipelines.distill import CheckConfig, DistillConfig
    from ddai.pipelines.distill.check import ConvertConfig
    from ddai.pipelines.distill.vet import VetConfig
    from ddai.pipelines.funnel.bucket_config import BucketConfig
    from ddai.pipelines.funnel.focus_config import FocusConfig
    from ddai.pipelines.funnel.lineage_config import LineageConfig
    from ddai.pipelines.funnel.plan_config import PlanConfig
    from ddai.pipelines.funnel.verify_config import VerifyConfig
    from ddai.pipelines.records.rerun import ForceFlag
    from ddai.pipelines.store.query_out import QueryConfig
    from ddai.reports.config import ReportConfig
    from ddai.reports.serve.config import ServeConfig

    return {
        ("serve",): (ServeConfig,),
        ("query",): (QueryConfig,),
        ("distill",): (DistillConfig, ForceFlag),
        ("distill", "check"): (CheckConfig, DistillConfig),  # the drops: DistillConfig's
        ("distill", "convert"): (ConvertConfig,),
        ("distill", "vet"): (VetConfig, ForceFlag),
        ("report",): (ReportConfig,),
        ("analyze", "attribution"): (AttributionConfig, RowsOut),
        ("analyze", "latency"): (RowsOut,),
        ("analyze", "drop-keep"): (RowsOut,),
        ("curate", "bucket"): (BucketConfig,),
        ("curate", "verify-gt"): (VerifyConfig,),
        ("curate", "focus"): (FocusConfig,),
        ("curate", "plan"): (PlanConfig,),
        ("lineage",): (LineageConfig,),
    }


COMMANDS = _configs()


def _command(path: tuple[str, ...]) -> typing.Any:
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


@pytest.mark.parametrize("path", list(COMMANDS), ids=[" ".join(p) for p in COMMANDS])
def test_every_flag_help_is_its_config_field_docstring(path):
    docs: dict[str, str] = {}
    for config in reversed(COMMANDS[path]):  # the command's own config (first) wins
        docs |= {k: v.replace("``", "`") for k, v in field_docs(config).items()}
    aliases = _alias_helps()
    checked = 0
    for p in _command(path).params:
        if p.name == "help":
            continue
        if p.name in docs and p.help == docs[p.name]:
            checked += 1
            continue
        assert p.help in aliases, (
            f"{' '.join(path)} {p.opts}: help {p.help!r} is neither the docstring of "
            f"{p.name!r} in {[c.__name__ for c in COMMANDS[path]]} nor a common alias's"
        )
    assert checked >= 1, f"{' '.join(path)}: no flag read its help from the config"


def test_no_flag_help_is_written_twice():
    """A help these commands show is declared on one field of one class (a shared flag lives on a
    shared base such as ``RunsFlag``, or one config's field is read by both commands)."""
    import dataclasses

    declared: dict[str, set[tuple[str, str]]] = {}
    for configs in COMMANDS.values():
        for config in configs:
            for cls in config.__mro__:
                if not dataclasses.is_dataclass(cls):
                    continue
                own = inspect.get_annotations(cls)
                for name, text in field_docs(cls).items():
                    if name in own:
                        declared.setdefault(text.replace("``", "`"), set()).add(
                            (cls.__qualname__, name)
                        )
    for name, value in vars(common).items():  # the shared flags' helps, written in common.py
        for meta in getattr(value, "__metadata__", ()):
            if getattr(meta, "help", None):
                declared.setdefault(meta.help, set()).add(("common", name))
    shown = {p.help for path in COMMANDS for p in _command(path).params}
    twice = {text: sorted(where) for text, where in declared.items() if len(where) > 1}
    assert {t: w for t, w in twice.items() if t in shown} == {}
