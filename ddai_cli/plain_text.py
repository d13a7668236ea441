"""What rich writes where it writes plain text, told without loading rich (~15 ms CPU of a
command's summary): whether a stream is no terminal by rich's own rules, the width rich gives it,
and whether lines print unchanged through it (``ddai_cli/common.py``'s ``summary``).
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any


def no_terminal(stream: Any) -> bool:
    """rich's ``Console.is_terminal`` is False for ``stream`` (its checks, in its order), and
    none of the cases where rich decides more (Jupyter, IDLE, Windows) applies."""
    if sys.platform == "win32" or "get_ipython" in vars(builtins):
        return False
    if getattr(sys.stdin, "__module__", "").startswith("idlelib"):
        return False
    tty = os.environ.get("TTY_COMPATIBLE", "")
    if tty in ("0", "1"):
        return tty == "0"
    if (force := os.environ.get("FORCE_COLOR")) is not None:
        return force == ""
    isatty = getattr(stream, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:
        return True


def rich_width() -> int:
    """The width rich gives a console that is no terminal (``Console.size``)."""
    columns = os.environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        return int(columns)
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns or 80
        except (AttributeError, ValueError, OSError):
            continue
    return 80


def fits(title: str, lines: list[str]) -> bool:
    """The lines print as they are through rich (no terminal): no tab to expand, no control
    character to strip, no ``:name:`` that could be an emoji code, a title that does not wrap."""
    if len(title) > rich_width():
        return False
    return all(x.isprintable() and x.count(":") < 2 for x in (title, *lines))
