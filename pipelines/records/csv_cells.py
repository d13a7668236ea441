"""Every CSV ddai writes, with cells that are safe to open in a spreadsheet, and read back.

A cell whose text starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is run as a
formula by Excel, LibreOffice and Google Sheets (``=HYPERLINK(…)``, ``@SUM(…)``, ``-2+3+cmd|…``),
and model answers, uids and log fields can hold anything. ``escape`` prefixes such a text with
``'`` (OWASP's rule for CSV injection; spreadsheets show the text as written and run nothing).

Only text is escaped. A typed number (``int``, ``float``, ``Decimal``, ``bool``: a score, a step,
``-1.5``) is written as the number it is, so it stays a number in a spreadsheet and when read
back; a number carries no formula (a float ``-inf`` or NaN is written as such, spelled ``-inf`` and
``NaN`` by both writers: polars reads ``nan`` as text, which made a whole column strings). A
text that is exactly a plain decimal number (``-0.5``, ``+3``, ``-1e-3``: ASCII digits, one
optional sign, point and exponent) is left alone too, since a spreadsheet reads it as that
number; ``-1+2``, ``-inf``, ``+1_0``, ``-1 `` and ``\\t1`` are escaped. Any other value (a date, a
map) is written as its text and escaped by the same rule. Header cells (column names, which a
query's ``PIVOT`` takes from data) are escaped like any cell.

A text that already starts with ``'`` before one of those characters gets a second ``'``, so
``unescape`` restores every value exactly: ddai reads its own sheets back (``review.csv`` as
``--decisions``, a query's CSV as a ``--scores`` table or a corpus's ``--text-from``).

Every CSV writer of the package goes through ``write_rows`` / ``rows_text`` (rows of Python values)
or ``write_frame`` (a polars frame, written by polars); no other module calls a CSV writer itself
(``tests/pipelines/test_csv_writers.py`` greps the package for them).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"
# a text a spreadsheet reads as a plain number; ASCII only (Python's float() also takes
# " 1", "1_0", "inf" and Unicode digits, which a spreadsheet does not read as numbers)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NUMBERS = (int, float, Decimal)  # bool is an int


def escape(value: Any) -> Any:
    """``value`` as a cell: a text a spreadsheet would run gets a leading ``'``; numbers and
    ``None`` are returned as they are, any other value as its escaped text."""
    if value is None or isinstance(value, _NUMBERS):
        return value
    text = value if isinstance(value, str) else str(value)
    if text.startswith(FORMULA_START) and not _NUMBER.fullmatch(text):
        return QUOTE + text
    if text.startswith(QUOTE) and text.lstrip(QUOTE).startswith(FORMULA_START):
        return QUOTE + text  # so that unescape's one stripped quote gives it back
    return text


def unescape(value: str) -> str:
    """The text ``escape`` was given (cells ddai did not escape come back unchanged)."""
    if value.startswith(QUOTE) and value[1:].lstrip(QUOTE).startswith(FORMULA_START):
        return value[1:]
    return value


_NAN = "NaN"  # polars' spelling; the csv module writes str(float("nan")), "nan"


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def write_rows(fh: IO[str], header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> int:
    """``header`` then ``rows`` as CSV to ``fh`` (open with ``newline=""``), every cell through
    ``escape`` and ``None`` as an empty cell; returns the rows written.

    Rows end in CRLF (RFC 4180): the csv module quotes a cell holding a character of the line
    ending, so with a bare ``\n`` a cell's ``\r`` would go out unquoted and split its row."""
    w = csv.writer(fh, lineterminator="\r\n")
    w.writerow([escape(h) for h in header])
    n = 0
    for r in rows:
        w.writerow(["" if v is None else _NAN if _is_nan(v) else escape(v) for v in r])
        n += 1
    return n


def rows_text(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """``write_rows`` into a string."""
    buf = io.StringIO()
    write_rows(buf, header, rows)
    return buf.getvalue()


def _text_columns(df: pl.DataFrame) -> list[str]:
    """Columns written as their values' escaped text: all but numbers, booleans, dates and times
    (polars formats those, and they start with a digit or a number's sign) and nested columns
    (which polars' CSV writer refuses anyway)."""
    import polars as pl

    kept = (pl.Boolean, pl.Date, pl.Datetime, pl.Time)
    return [
        c
        for c, t in df.schema.items()
        if not (t.is_numeric() or t.is_nested() or any(t == k for k in kept))
    ]


def _escape_expr(col: pl.Expr) -> pl.Expr:
    """``escape`` of every text of a String column, as one polars expression (the rule above:
    a formula start that is not a plain number, or quotes before a formula start, gets a ``'``)."""
    import polars as pl

    starts = "[" + re.escape("".join(FORMULA_START)) + "]"
    formula = col.str.contains("^" + starts) & ~col.str.contains("^" + _NUMBER.pattern + "$")
    return (
        pl.when(formula | col.str.contains("^" + QUOTE + "+" + starts))
        .then(QUOTE + col)
        .otherwise(col)
    )


def escape_frame(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its column names and text cells through ``escape`` (nulls stay null). String
    columns are escaped by polars (a report's downloads have millions of cells: per cell in
    Python that was seconds); other text-like columns cell by cell."""
    import polars as pl

    cols = [
        _escape_expr(pl.col(c)).alias(c)
        if df.schema[c] == pl.String
        else pl.Series(c, [escape(v) for v in df[c].to_list()], dtype=pl.String)
        for c in _text_columns(df)
    ]
    return df.with_columns(cols).rename({c: escape(c) for c in df.columns})


def unescape_frame(df: pl.DataFrame) -> pl.DataFrame:
    """``escape_frame`` undone on a frame read from a CSV (its String columns and names)."""
    import polars as pl

    cols = [
        pl.Series(c, [None if v is None else unescape(v) for v in df[c].to_list()], dtype=pl.String)
        for c, t in df.schema.items()
        if t == pl.String
    ]
    return df.with_columns(cols).rename({c: unescape(c) for c in df.columns})


def write_frame(df: pl.DataFrame, path: str | os.PathLike[str] | None = None) -> str | None:
    """``df`` as CSV by polars' writer (to ``path``, or returned as text), escaped."""
    return escape_frame(df).write_csv(path)
