"""What each command's ``--help`` costs in modules: every command, with every sub-command's
``--help`` under it, in a fresh interpreter, adds at most ``HELP_MODULE_BOUND`` modules to those of
``import typer, rich`` (the floor the help speed is measured against). A config in a heavy module,
an eager package ``__init__`` or a CLI module importing the step it runs shows up here as the
command's count jumping (``ddai distill --help`` added 163 modules when its package's ``__init__``
loaded the step)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from test_cli_app import HELP_ONE, fresh_json

from ddai.cli.app import COMMANDS

HELP_MODULE_BOUND = 50
"""Modules one command's help (all its sub-commands' included) may add to ``typer`` and ``rich``
(about 150). Largest today: ``query`` (46: ``QueryConfig``'s module reaches the store's I/O, object
storage and staging, with ``hashlib``, ``tempfile``, ``csv``, ``decimal`` and
``importlib.resources``), then ``train`` (44: its six sub-commands' modules and configs together);
``pointer`` 28 and ``distill`` 27 since their configs left the steps' modules."""


def _added_modules(name: str, prelude: str = "") -> list[str]:
    """The modules ``ddai NAME --help`` and every ``ddai NAME SUB… --help`` import, in one fresh
    interpreter, beyond what ``import typer, rich`` imported there first."""
    code = (
        "import contextlib, io, json, sys\n"
        "import typer, rich\n"
        "floor = set(sys.modules)\n"
        "from ddai.cli.app import load_command, main\n"
        f"{prelude}"
        "paths = []\n"
        "def walk(command, words):\n"
        "    paths.append(words)\n"
        "    for sub_name, sub in getattr(command, 'commands', {}).items():\n"
        "        walk(sub, [*words, sub_name])\n"
        "walk(load_command(sys.argv[1]), [sys.argv[1]])\n"
        f"{HELP_ONE}"
        "for words in paths:\n"
        "    ddai_help(words)\n"
        "print('ADDED ' + json.dumps(sorted(set(sys.modules) - floor)))\n"
    )
    return fresh_json(code, name, "ADDED")


def _over_bound(added: dict[str, list[str]]) -> str:
    """The commands over the bound, worst first, each with the ddai modules it loaded (where a
    fix starts) and how many others."""
    over = sorted(
        ((n, mods) for n, mods in added.items() if len(mods) > HELP_MODULE_BOUND),
        key=lambda item: -len(item[1]),
    )
    lines = []
    for n, mods in over:
        ours = [m for m in mods if m.startswith("ddai.")]
        lines.append(
            f"ddai {n} --help: +{len(mods)} modules ({len(mods) - len(ours)} outside ddai); "
            f"ddai's: {', '.join(ours)}"
        )
    return "\n".join(lines)


def test_every_commands_help_adds_few_modules_to_typer_and_rich():
    with ThreadPoolExecutor(max_workers=2) as pool:
        added = dict(zip(COMMANDS, pool.map(_added_modules, COMMANDS), strict=True))
    assert set(added) == set(COMMANDS) and len(added) > 15
    # what is measured: the command's own module, not only the registry
    assert all(f"ddai.cli.{COMMANDS[n].modules[0]}" in mods for n, mods in added.items())
    assert _over_bound(added) == ""


def test_help_cost_check_names_a_command_that_loads_its_step():
    """The bound can fail: a command whose module loads the step it runs is named, with the
    modules it pulled in."""
    prelude = (
        "import ddai.cli.report as report\n"
        "def register(app, _register=report.register):\n"
        "    import ddai.pipelines.distill.run\n"
        "    return _register(app)\n"
        "report.register = register\n"
    )
    added = {"report": _added_modules("report", prelude), "runs": _added_modules("runs")}
    message = _over_bound(added)
    assert message.startswith("ddai report --help: +"), message
    assert "ddai.pipelines.distill.run" in message and "ddai runs" not in message


def test_pointer_help_reads_configs_without_the_steps():
    """``ddai pointer … --help`` builds its flags from the light config modules: the world's
    generator, the embedding store, the user-set reader and the embed step stay unloaded."""
    added = _added_modules("pointer")
    assert "ddai.pipelines.pointer.configs" in added and "ddai.trainer.pointer.config" in added
    steps = ("world", "store", "user_set", "embed")
    assert [m for m in added if m.rsplit(".", 1)[-1] in steps and ".pointer." in m] == []


LIGHT_CONFIGS = {
    "distill": ("ddai.pipelines.distill.select_config", "ddai.pipelines.distill.configs"),
    "value": ("ddai.trainer.value.config", "ddai.pipelines.records.success"),
    "fixtures": ("ddai.pipelines.fixtures.world_config",),
    "demo": ("ddai.pipelines.fixtures.world_config",),
    "collect": ("ddai.trainer.episode.collect_config",),
    "eval": ("ddai.trainer.episode.collect_config",),
}
"""Each command's config modules, which its ``--help`` reads (so the check below measures it)."""
NOT_FOR_HELP = {
    "distill": (
        "ddai.pipelines.distill.select",
        "ddai.pipelines.records.schema",
        "ddai.cli.running",
    ),
    "value": ("ddai.pipelines.records.schema", "ddai.pipelines.records.tags"),
    "fixtures": ("ddai.pipelines.fixtures.world", "ddai.pipelines.pages.corpus"),
    "demo": ("ddai.pipelines.fixtures.world", "ddai.pipelines.pages.corpus"),
    "collect": ("ddai.trainer.episode.collect",),
    "eval": ("ddai.trainer.episode.evaluate", "ddai.pipelines.analyses.evaluation"),
}
"""What each command's config used to pull in with it: the step, the log schema and its tag
parser, the world's generator and the page corpus (5-25 ms CPU each of a 66 ms floor)."""


def test_configs_load_without_their_steps():
    """``ddai distill/value/fixtures/demo/collect/eval … --help`` read their configs from light
    modules: the selection's table code, the log schema, the world's generator, the collection
    loop and the evaluation's breakdown stay unloaded."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        added = dict(zip(LIGHT_CONFIGS, pool.map(_added_modules, LIGHT_CONFIGS), strict=True))
    missing = {n: [m for m in LIGHT_CONFIGS[n] if m not in added[n]] for n in added}
    loaded = {n: [m for m in NOT_FOR_HELP[n] if m in added[n]] for n in added}
    assert [(n, m) for n, ms in missing.items() for m in ms] == []
    assert [(n, m) for n, ms in loaded.items() for m in ms] == []
