"""Every command's ``--help`` at 80 columns prints every character its help was written with.

Walks the whole command tree built from the Typer app: for each command, each option's full names
(``--success-threshold``, ``--no-progress``) must appear uncut, each bracketed word of the help
texts (``[roles]``, ``[backends.NAME]``) must survive (rich markup used to eat them), and every
required option and argument must be marked ``[required]``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ddai.cli.app import COMMANDS as REGISTRY
from ddai.cli.app import app

runner = CliRunner()
_BRACKETED = re.compile(r"\[[^\[\]\n]+\]")


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """``(command path, click command)`` for the group and every command below it."""
    found = [(path, cmd)]
    if hasattr(cmd, "commands"):  # a group (Typer ships its own click, so no isinstance)
        for name in sorted(cmd.commands):
            # ``commands[name]``, not ``.items()``: the top-level group loads a command on lookup.
            found += _walk(cmd.commands[name], (*path, name))
    return found


COMMANDS = _walk(typer.main.get_command(app))


def _squash(text: str) -> str:
    """Whitespace removed: wrapping may move words to the next line, never drop characters."""
    return re.sub(r"\s+", "", text)


def _help(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    res = runner.invoke(app, [*path, "--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    return res.output


def test_the_walk_reaches_nested_commands():
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"runs", "judge", "curate bucket", "distill check", "backends check"} <= paths
    assert len(paths) > 30


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "ddai" for p, _ in COMMANDS])
def test_help_keeps_flags_brackets_and_marks_required(path, cmd, monkeypatch):
    out = _help(path, monkeypatch)
    flat = _squash(out)
    texts = [cmd.help or ""]
    required = 0
    for p in cmd.params:
        for name in (*p.opts, *p.secondary_opts):
            if name.startswith("-"):
                assert name in out.split() or name in flat, f"{name} missing from {path} --help"
        texts.append(getattr(p, "help", None) or "")
        required += bool(p.required)
    for text in texts:
        for word in _BRACKETED.findall(text):
            assert _squash(word) in flat, f"{word!r} eaten from {' '.join(path)} --help:\n{out}"
    assert flat.count("[required]") >= required, out
    # Nothing cut: an ellipsis only where the help itself was written with one.
    written = "".join(texts) + "".join(
        getattr(c, "help", "") or "" for c in getattr(cmd, "commands", {}).values()
    )
    assert out.count("…") <= written.count("…"), out


def test_rich_markup_no_longer_eats_the_config_tables(monkeypatch):
    """The cases the issue names, read as a person reads them."""
    verify = " ".join(_help(("curate", "verify-gt"), monkeypatch).split())
    assert "[backends.NAME]" in verify and "[roles] verifier" in verify
    sft = " ".join(_help(("train", "sft"), monkeypatch).split())
    assert "under a [trl] table" in sft
    judge = " ".join(_help(("judge",), monkeypatch).split())
    assert "ddai.toml [roles] judge" in judge and "\\[" not in judge


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.output.strip() == f"ddai {version('ddai')}"


def test_shell_completion_is_offered_and_installs_for_bash(tmp_path, monkeypatch):
    import typer._completion_shared as shared
    import typer.completion as completion

    # The flags take no value: typer detects the shell from the process tree, which depends on
    # how the tests were started (and can fail under a test runner); pin it to bash.
    for module in (completion, shared):
        monkeypatch.setattr(module, "_get_shell_name", lambda: "bash", raising=False)
    res = runner.invoke(app, ["--help"])
    assert "--install-completion" in res.output and "--show-completion" in res.output
    shown = runner.invoke(app, ["--show-completion"])
    assert shown.exit_code == 0, (shown.output, repr(shown.exception))
    assert "_DDAI_COMPLETE" in shown.output
    monkeypatch.setenv("HOME", str(tmp_path))
    res = runner.invoke(app, ["--install-completion"])
    assert res.exit_code == 0, res.output
    assert "_DDAI_COMPLETE" in (tmp_path / ".bash_completions" / "ddai.sh").read_text()
    assert ".bash_completions/ddai.sh" in (tmp_path / ".bashrc").read_text()


@pytest.mark.parametrize("path", [["train", "grpo"], ["train", "ppo"], ["collect"]])
def test_reward_timeout_help_says_late_groups_are_unscorable_not_zero(path):
    res = runner.invoke(app, [*path, "--help"], terminal_width=300, env={"COLUMNS": "300"})
    text = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert "unscorable: reward null in the log" in text and "score 0" not in text


GROUPS = [(p, c) for p, c in COMMANDS if hasattr(c, "commands")]


@pytest.mark.parametrize("path,group", GROUPS, ids=[" ".join(p) or "ddai" for p, _ in GROUPS])
def test_command_lists_print_every_short_help_uncut(path, group, monkeypatch):
    out = _help(path, monkeypatch)
    listing = out.split("\nCommands:\n", 1)[1]
    assert "..." not in listing and "…" not in listing, listing
    flat = _squash(listing)
    for name in group.commands:
        # the one line each command is listed with, whole (wrapped lines rejoin)
        # the top-level group lists its registry line, not the loaded command's help
        short = REGISTRY[name].help if not path else group.commands[name].short_help
        assert short, f"{' '.join((*path, name))} has no short help for the list"
        assert _squash(f"{name}{short}") in flat, f"{name}: {short!r} cut in:\n{listing}"


_OPTION_LINE = re.compile(r"^ {2}(?:-\w, )?--[\w-]+(?:, -\w)? (<[^>]*>\S*|\S+)")


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "ddai" for p, _ in COMMANDS])
def test_option_placeholders_share_one_style(path, cmd, monkeypatch):
    """Every option's value placeholder is ``<lowercase>`` (Typer's ``<int>``, ``<path>``, and
    ours: ``<dir>``, ``<file>``, ``<run>``), never ``FILE`` beside ``<path>``."""
    out = _help(path, monkeypatch)
    options = out.split("\nOptions:\n", 1)[-1]
    shown = [m.group(1) for line in options.splitlines() if (m := _OPTION_LINE.match(line))]
    assert shown or not any(getattr(p, "metavar", None) for p in cmd.params)
    odd = [s for s in shown if not s.startswith("/") and not re.fullmatch(r"<[^A-Z]+>(\.\.\.)?", s)]
    assert odd == [], f"{' '.join(path)}: {odd}"
