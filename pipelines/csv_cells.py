"""CSV cells that are safe to open in a spreadsheet (no formula injection), and back.

A cell whose text starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is run as a
formula by Excel, LibreOffice and Google Sheets (``=HYPERLINK(…)``, ``@SUM(…)``, ``-2+3+cmd|…``),
and model answers or log fields can hold anything. ``escape`` prefixes such a text with ``'`` (the
spreadsheet convention for "this is text"), so it shows as written and runs nothing; a plain
number such as ``-0.5`` is left alone (it is a number, not a formula). A text that already starts
with ``'`` before one of those characters gets a second ``'``, so ``unescape`` restores every
value exactly: ddai reads its own sheets back (``review.csv`` as ``--decisions``).
"""

from __future__ import annotations

from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def escape(value: Any) -> Any:
    """``value`` as a cell: texts that a spreadsheet would run get a leading ``'``."""
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(FORMULA_START) and not _number(value):
        return QUOTE + value
    if value.startswith(QUOTE) and value.lstrip(QUOTE).startswith(FORMULA_START):
        return QUOTE + value  # so that unescape's one stripped quote gives it back
    return value


def unescape(value: str) -> str:
    """The text ``escape`` was given (cells ddai did not escape come back unchanged)."""
    if value.startswith(QUOTE) and value[1:].lstrip(QUOTE).startswith(FORMULA_START):
        return value[1:]
    return value


def escape_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: escape(v) for k, v in row.items()}
