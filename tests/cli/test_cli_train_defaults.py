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
    (("collect",), "ddai.trainer.episode.collect:CollectConfig"),
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


def _names(node: ast.AST) -> str | None:
    """``Cls`` for ``Cls`` and ``module.Cls``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def field_of_param(callback, cls_name: str, fields: frozenset[str] = frozenset()) -> dict[str, str]:
    """``param -> field`` from the command's ``Cls(field=param, …)`` call (its source). A group of
    flags (``with_groups``) passed as ``Cls(**group)`` fills the fields its flags are named as
    (``config_flags`` names a flag as its field). A command a factory made
    (``ddai_cli/episode_train.py``) calls the class by the factory's parameter that holds it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(callback)))
    out = {}
    groups = getattr(callback, "__groups__", {})  # group parameter -> its flags
    held = inspect.getclosurevars(inspect.unwrap(callback)).nonlocals
    names = {cls_name} | {n for n, v in held.items() if getattr(v, "__name__", None) == cls_name}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _names(node.func) in names:
            for kw in node.keywords:
                if not isinstance(kw.value, ast.Name):
                    continue
                if kw.arg is None:  # Cls(**group)
                    out.update({f: f for f in groups.get(kw.value.id, ()) if f in fields})
                else:
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
    fields = frozenset(f.name for f in dataclasses.fields(cls))
    mapping = field_of_param(cmd.callback, cls.__name__, fields)
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


EPISODE_COMMANDS = [("train", "grpo"), ("train", "ppo"), ("collect",)]


@pytest.mark.parametrize("path", EPISODE_COMMANDS, ids=["-".join(p) for p in EPISODE_COMMANDS])
def test_nested_config_flags_default_to_their_nested_fields(path):
    """The episode, reward and backend flags build ``cfg.episode``/``rewards``/``backends``: each
    such flag of the command has its nested field's default, and every nested field has a flag."""
    from ddai.cli.options import EPISODE_GROUPS
    from ddai.trainer.episode.config import EpisodeBackends, EpisodeConfig, RewardOverrides

    classes = {"episode": EpisodeConfig, "rewards": RewardOverrides, "backends": EpisodeBackends}
    params = {p.name: p for p in _command(path).params}
    for group, cls in classes.items():
        # each group is ``config_flags`` over its nested config: its flags are named as the fields
        flags = inspect.signature(EPISODE_GROUPS[group]).parameters
        mapping = {name: name for name in flags}
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
    from ddai.trainer.episode.collect import CollectConfig
    from ddai.trainer.episode.config import EpisodeConfig
    from ddai.trainer.grpo.config import GRPORunConfig
    from ddai.trainer.ppo.config import PPORunConfig

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


# Every other command that builds a config dataclass from its flags: (command path, configs).
CONFIG_COMMANDS = [
    (("pointer", "world"), ["ddai.pipelines.pointer.user_set:PointerWorldConfig"]),
    (("pointer", "embed"), ["ddai.pipelines.pointer.embed:EmbedConfig"]),
    (
        ("pointer", "gen"),
        ["ddai.trainer.pointer.config:GenConfig", "ddai.trainer.pointer.config:ProposalConfig"],
    ),
    (
        ("pointer", "process"),
        ["ddai.trainer.pointer.config:RewardConfig", "ddai.trainer.pointer.config:ProcessConfig"],
    ),
    (
        ("pointer", "train"),
        [
            "ddai.trainer.pointer.config:PointerTrainConfig",
            "ddai.trainer.pointer.config:TrainSchedule",
            "ddai.trainer.pointer.config:RLConfig",
        ],
    ),
    (("pointer", "eval"), ["ddai.trainer.pointer.config:EvalConfig"]),
    (("report",), ["ddai.reports.config:ReportConfig"]),
    (("curate", "bucket"), ["ddai.pipelines.funnel.bucket:BucketConfig"]),
    (("curate", "verify-gt"), ["ddai.pipelines.funnel.verify_gt:VerifyConfig"]),
    (("curate", "focus"), ["ddai.pipelines.funnel.focus:FocusConfig"]),
    (("curate", "plan"), ["ddai.pipelines.funnel.plan:PlanConfig"]),
    (("distill",), ["ddai.pipelines.distill.run:DistillConfig"]),
    (("distill", "check"), ["ddai.pipelines.distill.check:CheckConfig"]),
    (("analyze", "attribution"), ["ddai.pipelines.analyses.attribution:AttributionConfig"]),
    (("query",), ["ddai.pipelines.store.query_out:QueryConfig"]),
    (("serve",), ["ddai.reports.serve.config:ServeConfig"]),
]


@pytest.mark.parametrize(
    ("path", "specs"), CONFIG_COMMANDS, ids=["-".join(p) for p, _ in CONFIG_COMMANDS]
)
def test_every_config_command_reads_its_defaults(path, specs):
    cmd = _command(path)
    compared, differ = 0, []
    for spec in specs:
        cls = _cls(spec)
        fields = frozenset(f.name for f in dataclasses.fields(cls))
        mapping = field_of_param(cmd.callback, cls.__name__, fields)
        defaults = _defaults(cls)
        parsers = getattr(cmd.callback, "__parsers__", {})  # a flag's text parsed into its field
        for p in cmd.params:
            field = mapping.get(p.name)
            if field is None or field not in defaults or p.required:
                continue
            compared += 1
            if parsers.get(p.name, lambda v: v)(p.default) != defaults[field]:
                differ.append(f"--{p.name}: {p.default!r} != {cls.__name__}.{field}")
    assert compared >= 2  # the mapping found the command's flags
    assert differ == []


def test_pointer_world_reads_the_synthetic_worlds_defaults():
    """``PointerWorldConfig`` (the command's flags) takes the synthetic world's defaults."""
    from ddai.pipelines.pointer.user_set import PointerWorldConfig
    from ddai.pipelines.pointer.world import WorldConfig

    given, world = _defaults(PointerWorldConfig), _defaults(WorldConfig)
    shared = {"seed", "n_queries", "dim", "n_topics", "test_frac", "clean_rate"}
    assert shared <= set(given)
    assert {k: given[k] for k in shared} == {k: world[k] for k in shared}


def test_model_tiny_reads_the_tiny_spec_defaults():
    from ddai.trainer.tiny import TinySpec

    cmd = _command(("model", "tiny"))
    shown = {p.name: p.default for p in cmd.params}
    spec = TinySpec()
    assert (shown["hidden_size"], shown["layers"], shown["heads"], shown["vocab_size"]) == (
        spec.hidden_size,
        spec.num_hidden_layers,
        spec.num_attention_heads,
        spec.vocab_size,
    )


def test_config_flags_make_a_field_without_default_required_and_keep_given_help():
    import typer
    from typer.testing import CliRunner

    from ddai.cli.flags import config_flags, with_groups

    @dataclasses.dataclass
    class Cfg:
        model: str
        """Starting ``model``."""
        seed: int = 0
        """Seed of the ``sampler``."""

    flags = config_flags(Cfg, {"model": {"help": "Model, as ``given``."}, "seed": None})
    seen = []
    app = typer.Typer(add_completion=False)

    @app.command()
    @with_groups({"run": flags})
    def run(*, run: dict) -> None:
        seen.append(Cfg(**run))

    runner = CliRunner()
    res = runner.invoke(app, [])
    assert res.exit_code == 2 and "--model" in res.output  # no default: required
    assert runner.invoke(app, ["--model", "m", "--seed", "3"]).exit_code == 0
    assert seen == [Cfg("m", 3)]
    out = runner.invoke(app, ["--help"], terminal_width=200).output
    # help given is shown as written; only read help is rewritten
    assert "Model, as ``given``." in out and "Seed of the `sampler`." in out
    assert _group_help(flags, "seed") == "Seed of the `sampler`."


def _group_help(group, name: str) -> str:
    """The help of flag ``name`` of a ``config_flags`` group."""
    import inspect
    import typing

    param = inspect.signature(group).parameters[name]
    return typing.get_args(param.annotation)[1].help
