"""``csv_cells``: formula texts escaped, numbers left alone, every value read back exactly."""

from __future__ import annotations

import csv
import io
import math
from datetime import timedelta
from decimal import Decimal

import polars as pl
import pytest

from ddai.pipelines.records.csv_cells import (
    escape,
    rows_text,
    unescape,
    unescape_frame,
    write_frame,
)


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
        ("-1e-3", "-1e-3"),
        ("-.5", "-.5"),
        ("-1+2", "'-1+2"),
        # float() reads these as numbers, a spreadsheet does not: escaped
        ("\t1", "'\t1"),
        ("\r5", "'\r5"),
        ("-1 ", "'-1 "),
        ("+1_0", "'+1_0"),
        ("-inf", "'-inf"),
        ("-nan", "'-nan"),
        ("-\u0663", "'-\u0663"),  # an Arabic-Indic digit
        ('=HYPERLINK("x")', '\'=HYPERLINK("x")'),
        ("'-1.5", "''-1.5"),
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


def test_numbers_pass_through_and_other_values_are_escaped_as_text():
    assert escape(-1.5) == -1.5 and escape(None) is None and escape(-3) == -3
    assert escape(Decimal("-2")) == Decimal("-2") and escape(True) is True
    assert math.isinf(escape(float("-inf")))  # a typed number carries no formula
    assert escape(timedelta(days=-1)) == "'-1 day, 0:00:00"
    assert escape({"k": "=x"}) == "{'k': '=x'}"


def test_rows_escape_header_and_cells_and_keep_a_carriage_return_in_its_row():
    text = rows_text(["=h", "n"], [["-1+2", -1.5], ["\rx", None]])
    assert text == "'=h,n\r\n'-1+2,-1.5\r\n\"'\rx\",\r\n"
    assert list(csv.reader(io.StringIO(text, newline=""))) == [
        ["'=h", "n"],
        ["'-1+2", "-1.5"],
        ["'\rx", ""],
    ]


def test_a_frame_writes_a_negative_duration_as_escaped_text():
    text = write_frame(pl.DataFrame({"d": [timedelta(days=-1)], "n": [-2]}))
    assert text == 'd,n\n"\'-1 day, 0:00:00",-2\n'


def test_a_frame_round_trips_through_its_csv():
    df = pl.DataFrame(
        {
            "=uid": ['=HYPERLINK("x")', "-1+2", None, "'@x", "-0.5"],
            "score": [-1.5, 0.0, None, 2.0, -3.0],
            "n": [-1, 2, 3, 4, 5],
            "cat": pl.Series(["+c", "d", "e", "f", "g"], dtype=pl.Categorical),
        }
    )
    text = write_frame(df)
    lines = text.splitlines()
    assert lines[0] == "'=uid,score,n,cat"
    assert lines[1] == '"\'=HYPERLINK(""x"")",-1.5,-1,\'+c'
    assert lines[2] == "'-1+2,0.0,2,d"
    assert lines[4] == "''@x,2.0,4,f"
    back = unescape_frame(pl.read_csv(io.StringIO(text)))
    assert back.columns == df.columns
    assert back["score"].dtype == pl.Float64 and back["n"].dtype == pl.Int64
    assert back.with_columns(pl.col("cat").cast(pl.Categorical)).equals(df)


def test_escape_frame_matches_escape_cell_by_cell():
    """The frame's String columns are escaped by polars: every cell as ``escape`` gives it,
    nulls, plain numbers, quoted formulas and random texts over the characters that matter."""
    import random

    import polars as pl

    from ddai.pipelines.records import csv_cells

    rng = random.Random(1)
    alphabet = ["=", "+", "-", "@", "\t", "\r", "'", "1", "0", ".", "e", "E", "a", " ", "\n", "_", "é", "٣"]  # fmt: skip
    texts = [None, "", "-1", "-1.5", "+3", "-1e-3", "-1+2", "-inf", "+1_0", "-1 ", "\t1", "'=x", "''=x", "'a", "1\n", "-.5e+7"]  # fmt: skip
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(5000)]
    out = csv_cells.escape_frame(pl.DataFrame({"=t": texts, "n": range(len(texts))}))
    assert out.columns == ["'=t", "n"]
    assert out["'=t"].to_list() == [None if t is None else csv_cells.escape(t) for t in texts]
    assert out["'=t"].to_list()[:12] == [None, "", "-1", "-1.5", "+3", "-1e-3", "'-1+2", "'-inf", "'+1_0", "'-1 ", "'\t1", "''=x"]  # fmt: skip


def test_both_writers_spell_non_finite_floats_alike_and_read_back_as_numbers():
    """A NaN score (a loss that diverged, a NaN in a query's result) is one cell in every CSV
    ddai writes: ``rows_text`` (the csv module) spelled it ``nan``, which polars' reader takes
    for text, turning the whole column into strings, while polars' writer spells it ``NaN``."""
    values = [1.5, float("nan"), float("inf"), float("-inf"), None]
    by_rows = rows_text(["i", "x"], list(enumerate(values))).replace("\r\n", "\n")
    frame = pl.DataFrame({"i": range(5), "x": values}, schema={"i": pl.Int64, "x": pl.Float64})
    assert by_rows == write_frame(frame) == "i,x\n0,1.5\n1,NaN\n2,inf\n3,-inf\n4,\n"
    back = pl.read_csv(io.StringIO(by_rows))
    assert back.schema["x"] == pl.Float64
    assert math.isnan(back["x"][1]) and back["x"][2] == math.inf and back["x"][4] is None
