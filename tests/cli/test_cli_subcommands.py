"""A group that several modules fill (``ddai_cli/app.py``'s ``SUBCOMMANDS``): each sub-command is
registered by the module the table names, so running one loads only that module."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ddai.cli.app import SUBCOMMANDS, load_command


@pytest.mark.parametrize("group", sorted(SUBCOMMANDS))
def test_the_table_names_the_module_that_registers_each_sub_command(group):
    whole = set(load_command(group).commands)
    assert set(SUBCOMMANDS[group]) == whole  # every sub-command is in the table
    for module in set(SUBCOMMANDS[group].values()):
        alone = set(load_command(group, (module,)).commands)
        assert alone == {c for c, m in SUBCOMMANDS[group].items() if m == module}


def test_one_sub_commands_help_loads_only_its_module():
    code = (
        "import sys\n"
        "from ddai.cli.app import main\n"
        "sys.argv = ['ddai', 'train', 'grpo', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('ddai.cli.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.strip().splitlines()[-1]
    assert "'ddai.cli.train'" in loaded and "--max-steps" in out.stdout
    for other in ("ppo", "value", "plan"):
        assert f"'ddai.cli.{other}'" not in loaded
