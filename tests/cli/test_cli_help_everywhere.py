"""Every flag and argument of every command (the whole tree, walked from the app) shows the
docstring of a config field or the help of one shared alias (``ddai_cli/common.py``,
``options.py``, ``running.py``), and the CLI writes at most 20 help texts by hand: the
commands are generated from their configs. The per-command tests
(``test_cli_help_source.py``, ``test_cli_train_help_source.py``, ``test_cli_flag_docs.py``)
hold each command to its own configs; this one leaves no command out."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

from test_cli_help import COMMANDS as HELP_TREE

from ddai.cli import app as app_module
from ddai.cli.fields import field_docs

CLI = Path(app_module.__file__).parent
MAX_HAND_WRITTEN = 20


# the tree test_cli_help.py walks (every command loaded), less the root group
COMMANDS = [(p, c) for p, c in HELP_TREE if p]


def _field_docs() -> set[str]:
    """The field docstrings of every dataclass in the package's loaded modules (the walk above
    loaded every command's module and the configs it reads), as a flag shows them."""
    docs: set[str] = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("ddai.") or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                try:
                    docs |= {t.replace("``", "`") for t in field_docs(value).values()}
                except (OSError, TypeError):  # a dataclass made at run time: no source
                    continue
    return docs


def _alias_helps() -> set[str]:
    helps = {app_module.NO_BARS_HELP}
    for name in ("common", "options", "running"):
        module = sys.modules.get(f"ddai.cli.{name}")
        for value in vars(module).values() if module else ():
            for meta in getattr(value, "__metadata__", ()):
                if getattr(meta, "help", None):
                    helps.add(meta.help)
    return helps


def _literal(node: ast.expr) -> bool:
    """A text written in place: a string, an f-string, or strings joined."""
    if isinstance(node, ast.BinOp):
        return _literal(node.left) and _literal(node.right)
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def _hand_written() -> list[str]:
    """``file:line`` of every help text written by hand in ddai_cli: a ``help=`` keyword given a
    string (``short_help`` is a command's one line in its group's list, not a flag's help; a
    group's ``help=COMMANDS[name].help`` reads the registry) and a ``*_HELP`` constant."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                found += [
                    f"{path.name}:{k.lineno}"
                    for k in node.keywords
                    if k.arg == "help" and _literal(k.value)
                ]
            elif isinstance(node, ast.Assign) and _literal(node.value):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                found += [f"{path.name}:{node.lineno}" for n in names if n.endswith("_HELP")]
    return found


def test_every_param_of_every_command_reads_a_docstring_or_a_shared_alias():
    allowed = _field_docs() | _alias_helps()
    stray = {
        f"{' '.join(path)} {p.opts[0] if p.opts else p.name}": p.help
        for path, cmd in COMMANDS
        for p in cmd.params
        if p.name != "help" and getattr(p, "help", None) and p.help not in allowed
    }
    assert stray == {}
    assert len(COMMANDS) > 40


def test_the_cli_writes_at_most_20_helps_by_hand():
    written = _hand_written()
    assert len(written) <= MAX_HAND_WRITTEN, written
    assert "common.py" in " ".join(written)  # the count sees the shared aliases' texts


def test_a_group_reads_its_help_from_the_registry():
    from ddai.cli.app import COMMANDS, load_command

    for name in ("analyze", "backends", "corpus", "curate", "distill", "fixtures", "model"):
        assert load_command(name).help == COMMANDS[name].help
