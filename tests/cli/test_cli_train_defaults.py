"""One definition of every training default: each flag of a training command that fills a config
field has that field's default (read from the config dataclass, not restated)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap

import pytest

from ddai.cli.app import load_command

# (command path, config class): the command builds one of these from its flags.
COMMANDS = [
    (("train", "sft"), "ddai.trainer.sft.train:SFTRunConfig"),
    (("train", "grpo"), "ddai.trainer.grpo.config:GRPORunConfig"),
    (("train", "ppo"), "ddai.trainer.ppo.config:PPORunConfig"),
    (("train", "collect"), "ddai.trainer.search.collect:CollectConfig"),
    (("train", "value"), "ddai.trainer.value.train:ValueTrainConfig"),
    (("train", "value-sft"), "ddai.trainer.value.sft:ValueSFTConfig"),
    (("value", "score"), "ddai.trainer.value.score:ValueScoreConfig"),
]


def _cls(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def _command(path: tuple[str, ...]):
    cmd = load_command(path[0])
    for part in path[1:]:
        cmd = cmd.commands[part]
    return cmd


def field_of_param(callback, cls_name: str) -> dict[str, str]:
    """``param -> field`` from the command's ``Cls(field=param, …)`` call (its source)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(callback)))
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == cls_name:
            for kw in node.keywords:
                if isinstance(kw.value, ast.Name):
                    out[kw.value.id] = kw.arg
    return out


def _defaults(cls: type) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


@pytest.mark.parametrize(("path", "spec"), COMMANDS, ids=["-".join(p) for p, _ in COMMANDS])
def test_flag_defaults_are_the_config_defaults(path, spec):
    cls = _cls(spec)
    cmd = _command(path)
    mapping = field_of_param(cmd.callback, cls.__name__)
    defaults = _defaults(cls)
    compared, differ = 0, []
    for p in cmd.params:
        field = mapping.get(p.name)
        if field is None or field not in defaults or p.required:
            continue
        compared += 1
        if p.default != defaults[field]:
            differ.append(
                f"--{p.name.replace('_', '-')}: {p.default!r} != {field}={defaults[field]!r}"
            )
    assert compared >= 3  # the mapping found the command's flags
    assert differ == []


def test_the_check_sees_a_restated_default():
    # the control: a command whose flag restates a default, differently
    import typer

    @dataclasses.dataclass
    class Cfg:
        max_turns: int = 7
        search_k: int = 5
        seed: int = 0

    app = typer.Typer(add_completion=False)

    @app.command()
    def run(max_turns: int = 9, search_k: int = 5, seed: int = 0) -> None:
        Cfg(max_turns=max_turns, search_k=search_k, seed=seed)

    cmd = typer.main.get_command(app)
    mapping = field_of_param(cmd.callback, "Cfg")
    assert mapping == {"max_turns": "max_turns", "search_k": "search_k", "seed": "seed"}
    bad = [p.name for p in cmd.params if p.default != _defaults(Cfg)[mapping[p.name]]]
    assert bad == ["max_turns"]


@pytest.mark.parametrize(
    ("flags", "shown"), [([], True), (["--no-progress"], False), (["--json"], False)]
)
def test_value_score_progress_flag_reaches_its_config(flags, shown, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import ddai.trainer.value.score as score
    from ddai.cli.app import app

    seen = []

    def fake(cfg):
        seen.append(cfg)
        raise ValueError("stopped after reading the config")

    monkeypatch.setattr(score, "score_runs", fake)
    args = ["value", "score", "--checkpoint", str(tmp_path), "--logs", str(tmp_path), "--run", "r"]
    res = CliRunner().invoke(app, [*args, *flags])
    assert res.exit_code == 2 and "stopped after reading the config" in res.output
    assert [c.progress for c in seen] == [shown]


EPISODE_COMMANDS = [("train", "grpo"), ("train", "ppo"), ("train", "collect")]


@pytest.mark.parametrize("path", EPISODE_COMMANDS, ids=["-".join(p) for p in EPISODE_COMMANDS])
def test_nested_config_flags_default_to_their_nested_fields(path):
    """The episode, reward and backend flags build ``cfg.episode``/``rewards``/``backends``: each
    such flag of the command has its nested field's default, and every nested field has a flag."""
    from ddai.cli.options import EPISODE_GROUPS
    from ddai.trainer.search.config import EpisodeBackends, EpisodeConfig, RewardOverrides

    classes = {"episode": EpisodeConfig, "rewards": RewardOverrides, "backends": EpisodeBackends}
    params = {p.name: p for p in _command(path).params}
    for group, cls in classes.items():
        mapping = field_of_param(EPISODE_GROUPS[group], cls.__name__)
        defaults = _defaults(cls)
        assert sorted(mapping.values()) == sorted(defaults), group  # every field has its flag
        differ = [
            f"{param}: {params[param].default!r} != {group}.{field}={defaults[field]!r}"
            for param, field in mapping.items()
            if params[param].default != defaults[field]
        ]
        assert differ == []


def test_the_run_configs_hold_the_nested_configs():
    # One episode config per run, nested: no episode field is copied into a run config, and each
    # run gets its own (a default_factory, not one shared instance).
    from ddai.trainer.grpo.config import GRPORunConfig
    from ddai.trainer.ppo.config import PPORunConfig
    from ddai.trainer.search.collect import CollectConfig
    from ddai.trainer.search.config import EpisodeConfig

    for cls in (GRPORunConfig, PPORunConfig, CollectConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        assert {"episode", "rewards", "backends"} <= names, cls
        assert not names & {f.name for f in dataclasses.fields(EpisodeConfig)}, cls
        required = {"model": "m", "data": "d", "corpus": "c"}
        if "output_dir" in names:
            required["output_dir"] = "o"
        a, b = cls(**required), cls(**required)
        assert a.episode == EpisodeConfig() and a.episode is not b.episode


@pytest.mark.parametrize(("path", "spec"), COMMANDS, ids=["-".join(p) for p, _ in COMMANDS])
def test_flags_named_as_fields_have_the_field_default(path, spec):
    # The flags a command reads from its config (``options.config_flags``) are named as the
    # field itself; with the explicit ones compared above, every flag of a field is checked.
    cls = _cls(spec)
    defaults = _defaults(cls)
    cmd = _command(path)
    differ = [
        f"{p.name}: {p.default!r} != {defaults[p.name]!r}"
        for p in cmd.params
        if p.name in defaults and not p.required and p.default != defaults[p.name]
    ]
    assert differ == []


def test_config_flags_take_type_default_and_help_from_the_field():
    import typer
    from typer.testing import CliRunner

    from ddai.cli.flags import config_flags, with_groups

    @dataclasses.dataclass
    class Cfg:
        model: str
        kl_coef: float = 0.05
        """KL coefficient β (0: off)."""
        whiten: bool = True
        """Whiten the ``advantages``."""

    flags = config_flags(Cfg, {"kl_coef": "--kl", "whiten": "--whiten/--no-whiten"})
    seen = []
    app = typer.Typer(add_completion=False)

    @app.command()
    @with_groups({"settings": flags})
    def run(model: str = "m", *, settings: dict) -> None:
        seen.append(Cfg(model=model, **settings))

    runner = CliRunner()
    assert runner.invoke(app, []).exit_code == 0
    assert runner.invoke(app, ["--kl", "0.5", "--no-whiten"]).exit_code == 0
    assert seen == [Cfg("m"), Cfg("m", kl_coef=0.5, whiten=False)]
    out = runner.invoke(app, ["--help"], terminal_width=200).output
    assert "KL coefficient β (0: off)." in out and "Whiten the `advantages`." in out
    assert runner.invoke(app, ["--kl", "x"]).exit_code == 2  # the field's type, checked
    with pytest.raises(KeyError, match="model has no docstring"):
        config_flags(Cfg, {"model": None})
