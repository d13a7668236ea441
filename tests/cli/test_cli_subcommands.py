"""A group that several modules fill (``ddai_cli/app.py``'s ``SUBCOMMANDS``): each sub-command is
registered by the module the table names, so running one loads only that module."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ddai.cli import app as app_module
from ddai.cli.app import COMMANDS, GROUP_COMMANDS, SUBCOMMANDS, app, load_command


@pytest.mark.parametrize("group", sorted(SUBCOMMANDS))
def test_the_table_names_the_module_that_registers_each_sub_command(group):
    whole = set(load_command(group).commands)
    assert set(SUBCOMMANDS[group]) == whole  # every sub-command is in the table
    for modules in {e.modules for e in SUBCOMMANDS[group].values()}:
        alone = load_command(group, modules).commands
        assert set(alone) == {c for c, e in SUBCOMMANDS[group].items() if e.modules == modules}
        for name, command in alone.items():  # the listing's line is the command's own
            assert command.short_help == SUBCOMMANDS[group][name].help


@pytest.mark.parametrize("group", sorted(GROUP_COMMANDS))
def test_a_group_one_module_registers_lists_its_table_lines(group):
    """``GROUP_COMMANDS`` names every sub-command of the group, each with its own line."""
    assert group not in SUBCOMMANDS
    commands = load_command(group).commands
    assert set(commands) == set(GROUP_COMMANDS[group])
    for name, command in commands.items():
        assert command.short_help == GROUP_COMMANDS[group][name]


def test_a_loaded_top_level_command_lists_its_registry_line():
    """Once loaded, a one-command module's command keeps the line ``ddai --help`` shows."""
    for name in ("collect", "ingest", "runs"):
        assert load_command(name).short_help == COMMANDS[name].help


def _loaded(argv: list[str]) -> tuple[str, str]:
    """``ddai ARGV`` in a fresh interpreter: what it printed, and the ``ddai.cli``,
    ``ddai.pipelines`` and ``ddai.trainer`` modules it loaded."""
    code = (
        "import sys\n"
        "from ddai.cli.app import main\n"
        f"sys.argv = {['ddai', *argv]!r}\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('ddai.cli.', 'ddai.pipelines.', 'ddai.trainer.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stdout.strip().splitlines()[-1]


def test_one_sub_commands_help_loads_only_its_module():
    text, loaded = _loaded(["train", "grpo", "--help"])
    assert "'ddai.cli.train'" in loaded and "--max-steps" in text
    for other in ("ppo", "value", "value_train", "value_sft", "plan", "train_sft"):
        assert f"'ddai.cli.{other}'" not in loaded


def test_train_sft_help_builds_no_episode_flags():
    """``ddai train sft --help`` loads its own module: not ``train grpo``'s, its episode groups'
    flags (``ddai_cli/options.py``, ``ddai_cli/episode_train.py``) nor GRPO's config."""
    text, loaded = _loaded(["train", "sft", "--help"])
    assert "'ddai.cli.train_sft'" in loaded and "--assistant-only-loss" in text
    unloaded = ("ddai.cli.train", "ddai.cli.options", "ddai.cli.episode_train")
    assert [m for m in (*unloaded, "ddai.trainer.grpo.config") if f"'{m}'" in loaded] == []


@pytest.mark.parametrize(
    "argv,own,flag",
    [
        (["curate", "focus", "--help"], "curate_focus", "--hard-max"),
        (["curate", "bucket", "--help"], "curate_bucket", "--mastered"),
    ],
)
def test_one_curate_step_loads_only_its_module_and_config(argv, own, flag):
    """``ddai curate focus --help`` builds focus's flags alone: the other steps' CLI modules and
    configs (each built at import) stay unloaded, and so do the steps themselves."""
    text, loaded = _loaded(argv)
    assert f"'ddai.cli.{own}'" in loaded and flag in text
    modules = {e.modules[0] for e in SUBCOMMANDS["curate"].values()} | {"lineage"}
    assert [m for m in modules - {own} if f"'ddai.cli.{m}'" in loaded] == []
    step = own.removeprefix("curate_")
    configs = [f"ddai.pipelines.funnel.{s}_config" for s in ("bucket", "focus", "verify", "plan")]
    assert f"'ddai.pipelines.funnel.{step}_config'" in loaded
    assert [c for c in configs if f"'{c}'" in loaded and step not in c] == []
    assert "'ddai.pipelines.funnel.lineage_config'" not in loaded
    assert "'ddai.pipelines.funnel.focus'" not in loaded  # the step runs, its --help does not


@pytest.mark.parametrize(
    "argv,own,flag,unloaded",
    [
        (
            ["pointer", "world", "--help"],
            "pointer_world",
            "--queries",
            "ddai.trainer.pointer.config",
        ),
        (["pointer", "gen", "--help"], "pointer_gen", "--temps", "ddai.cli.running"),
    ],
)
def test_one_pointer_command_loads_only_its_module(argv, own, flag, unloaded):
    """``ddai pointer X --help`` loads X's module alone: world's help builds no trainer config,
    gen's no ``--launch`` flags (``ddai_cli/running.py``)."""
    text, loaded = _loaded(argv)
    assert f"'ddai.cli.{own}'" in loaded and flag in text
    others = {e.modules[0] for e in SUBCOMMANDS["pointer"].values()} - {own}
    assert [m for m in sorted(others) if f"'ddai.cli.{m}'" in loaded] == []
    assert f"'{unloaded}'" not in loaded


@pytest.mark.parametrize("group", sorted(SUBCOMMANDS))
def test_the_groups_listing_loads_no_module_and_reads_as_the_loaded_group(group, monkeypatch):
    text, loaded = _loaded([group, "--help"])
    for entry in SUBCOMMANDS[group].values():
        assert f"'ddai.cli.{entry.modules[0]}'" not in loaded
    assert all(f"  {name} " in text for name in SUBCOMMANDS[group])
    runner = CliRunner()
    listed = runner.invoke(app, [group, "--help"], terminal_width=100)
    load_command(group)  # the modules bound the table's lines at import, before the patch
    monkeypatch.setattr(app_module, "SUBCOMMANDS", {})  # the old way: load every module
    loaded_help = runner.invoke(app, [group, "--help"], terminal_width=100)
    assert listed.exit_code == loaded_help.exit_code == 0
    assert listed.output == loaded_help.output


@pytest.mark.parametrize(
    "argv,own,flag",
    [
        (["train", "value", "--help"], "value_train", "--head"),
        (["train", "value-sft", "--help"], "value_sft", "--critic"),
        (["value", "score", "--help"], "value_score", "--checkpoint"),
    ],
)
def test_one_value_command_loads_only_its_module(argv, own, flag):
    """``ddai train value --help`` builds its own config's flags alone: the other value
    commands' modules stay unloaded, and so do the episode groups' flags (``ddai_cli/options.py``:
    the value commands take the plain ``POLICY`` spec) and, for ``value score``, ``--launch``'s."""
    text, loaded = _loaded(argv)
    assert f"'ddai.cli.{own}'" in loaded and flag in text
    others = {"value_train", "value_sft", "value_score"} - {own}
    assert [m for m in sorted(others) if f"'ddai.cli.{m}'" in loaded] == []
    assert "'ddai.cli.options'" not in loaded and "'ddai.trainer.episode.config'" not in loaded
    assert ("'ddai.cli.running'" in loaded) == (own != "value_score")
