"""``csv_cells``: formula texts escaped, numbers left alone, every value read back exactly."""

from __future__ import annotations

import pytest

from ddai.pipelines.csv_cells import escape, unescape


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+x", "'+x"),
        ("-x", "'-x"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("-0.5", "-0.5"),  # a number, not a formula
        ("+3", "+3"),
        ("plain", "plain"),
        ("'=x", "''=x"),  # already quoted: quoted once more, so reading back is exact
        ("'''=x", "''''=x"),
        ("''abc", "''abc"),
        ("", ""),
    ],
)
def test_escape_and_unescape_round_trip(value, cell):
    assert escape(value) == cell
    assert unescape(cell) == value


def test_non_text_values_pass_through():
    assert escape(-1.5) == -1.5 and escape(None) is None and escape(3) == 3
