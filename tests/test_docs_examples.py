"""The command lines the docs show (README.md and docs/*.md, in code blocks) parse as written: each
names a real command, every flag exists on it under its current spelling (an old spelling only in
the example that shows its notice), every choice is one the flag offers, and no stray word is left
as an extra argument. An indented example block ends at a blank line, or the prose after it joins
the last command line (Markdown renders it inside the code, and a copied line carries it)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from ddai.cli.app import DEPRECATED_COMMANDS, DEPRECATED_FLAGS, app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_COMMAND = re.compile(r"^(?P<indent>\s*)(?:\$ )?(?P<cmd>ddai [^\n]*)$")
_ELIDED = {"…", "..."}  # "ddai train grpo … --launch 8": the rest of an earlier example


def _examples(page: Path) -> list[tuple[int, str, str | None]]:
    """``(line, command line, the line after it)`` for every ``ddai …`` line of a code block
    (fenced, or indented by four spaces), continuation lines (``\\``) joined."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, str | None]] = []
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        m = _COMMAND.match(line)
        if m and (fenced or len(m["indent"]) >= 4):
            cmd, start = m["cmd"], i
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            after = lines[i + 1] if i + 1 < len(lines) else None
            for part in cmd.split("&&"):
                found.append((start + 1, part.strip(), after))
        i += 1
    return found


EXAMPLES = [(page, *ex) for page in PAGES for ex in _examples(page)]


def test_the_examples_are_found() -> None:
    """The extraction is live: every page family with examples contributes some."""
    assert len(EXAMPLES) >= 70
    pages = {page.name for page, *_ in EXAMPLES}
    assert {"cli.md", "curate.md", "ingest.md", "training.md", "pointer.md"} <= pages


def _resolve(words: list[str]) -> tuple[tuple[str, ...], Any, list[str]]:
    """The command path, the click command and the words left for it."""
    cmd = typer.main.get_command(app)
    path: list[str] = []
    while hasattr(cmd, "commands") and words and words[0] in cmd.commands:
        path.append(words[0])
        cmd = cmd.commands[words.pop(0)]  # ``[name]`` loads the real command
    return tuple(path), cmd, words


@pytest.mark.parametrize(
    ("page", "line", "command", "after"),
    EXAMPLES,
    ids=[f"{page.name}:{line}" for page, line, _, _ in EXAMPLES],
)
def test_every_example_parses(page: Path, line: int, command: str, after: str | None) -> None:
    from typer import _click as click

    words = [w for w in shlex.split(command, comments=True)[1:] if w not in _ELIDED]
    old_path = next((old for old in DEPRECATED_COMMANDS if tuple(words[: len(old)]) == old), None)
    shows_notice = after is not None and after.startswith(("note: `ddai", "`ddai"))
    assert old_path is None or shows_notice, f"{command!r} uses the old path {old_path}"
    if old_path is not None:
        words = [*DEPRECATED_COMMANDS[old_path], *words[len(old_path) :]]
    path, cmd, rest = _resolve(words)
    assert path, f"{command!r}: no such command"
    if hasattr(cmd, "commands") and not cmd.invoke_without_command:
        pytest.fail(f"{command!r}: {' '.join(path)} needs a sub-command")
    old = DEPRECATED_FLAGS.get(path, {})
    used_old = [w for w in rest if w.split("=")[0] in old]
    assert not used_old or shows_notice, f"{command!r}: old spelling {used_old}, now {old}"
    rest = [old.get(w, w) for w in rest]
    try:
        cmd.make_context(" ".join(path), rest)
    except click.exceptions.NoSuchOption as e:
        pytest.fail(f"{page.name}:{line} {command!r}: {e.format_message()}")
    except click.exceptions.BadParameter as e:
        if "is not one of" in e.format_message():
            pytest.fail(f"{page.name}:{line} {command!r}: {e.format_message()}")
    except click.exceptions.UsageError as e:
        if "unexpected extra argument" in e.format_message():
            pytest.fail(f"{page.name}:{line} {command!r}: {e.format_message()}")
    except click.exceptions.Exit:
        pass


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_indented_examples_end_at_a_blank_line(page: Path) -> None:
    """Prose right under an indented example (no blank line between) renders as part of it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    joined = [
        f"{page.name}:{i + 2}: {after!r}"
        for i, (line, after) in enumerate(itertools.pairwise(lines))
        if _COMMAND.match(line) and line.startswith("    ") and after.strip()
        if not after.startswith(("    ", "```"))
    ]
    assert joined == []


def test_cli_page_quotes_the_old_command_notices() -> None:
    """docs/cli.md names each old command path and quotes the notice it prints, as printed."""
    from ddai.cli.app import rewrite_args

    text = re.sub(r"\s+", " ", (ROOT / "docs" / "cli.md").read_text(encoding="utf-8"))
    for old in DEPRECATED_COMMANDS:
        notices: list[str] = []
        rewrite_args([*old, "--help"], notice=notices.append)
        assert notices, old
        for notice in notices:
            assert f"`` {notice} ``" in text, notice


ROLE_FLAGS = (
    "--judge",
    "--generator",
    "--rewriter",
    "--verifier",
    "--vqa",
    "--embedder",
    "--search",
    "--vetter",
)


def test_example_backends_are_defined_in_the_docs() -> None:
    """A role flag in an example names ``local`` or a backend whose ``[backends.NAME]`` table the
    docs show: any other name exits 2 (``no backend named …``) for a reader who copies it."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    defined = {"local", *re.findall(r"\[backends\.([A-Za-z0-9_-]+)\]", text)}
    unknown = []
    for page, line, command, _ in EXAMPLES:
        words = shlex.split(command, comments=True)
        for flag, value in itertools.pairwise(words):
            if flag in ROLE_FLAGS and value not in defined:
                unknown.append(f"{page.name}:{line} {flag} {value}")
    assert unknown == []
