"""Success is spelled once per language: in SQL the ``is_success`` and ``success_threshold()``
macros (defined with the ``rollouts`` view), in Python ``schema.is_success`` and
``schema.SUCCESS_THRESHOLD`` (polars' ``select.success_expr`` for frames); each is tested against
the Python rule, and no library file spells the rule or the default threshold a second time."""

from __future__ import annotations

import itertools
import re
from importlib import resources

import duckdb
import polars as pl
from support.package import modules

from ddai.pipelines.distill import fetch, select
from ddai.pipelines.records import schema
from ddai.pipelines.store import query

# judge scores around and at the threshold, the three format-gate states, two thresholds
GRID = list(itertools.product((None, 0.0, 0.5, 0.99, 1.0, 1.5), (None, True, False), (0.5, 1.0)))


def test_macro_matches_the_python_rule():
    con = duckdb.connect()
    con.execute("CREATE TABLE rollouts_src (judge_score DOUBLE, format_ok BOOLEAN)")
    con.execute(query.sql_text("rollouts"))
    for judge, fmt, threshold in GRID:
        got = con.execute("SELECT is_success(?, ?, ?)", [judge, fmt, threshold]).fetchone()[0]
        assert got is schema.is_success(judge, fmt, threshold), (judge, fmt, threshold)


def test_no_sql_file_restates_the_rule():
    spelled = re.compile(r"judge\w*\s*>=\s*\S+\s+AND\s+\S*format_ok\s+IS\s+DISTINCT", re.I)
    restated = []
    for f in resources.files("ddai.sql").iterdir():
        if not f.name.endswith(".sql"):
            continue
        code = "\n".join(
            ln for ln in f.read_text().splitlines() if not ln.lstrip().startswith("--")
        )
        # the one definition
        code = re.sub(r"CREATE OR REPLACE MACRO is_success\(.*?;", "", code, flags=re.S)
        if spelled.search(code):
            restated.append(f.name)
    assert restated == []
    assert "MACRO is_success(" in query.sql_text("rollouts")


def test_default_threshold_macro_is_the_python_constant():
    con = duckdb.connect()
    con.execute(query.success_macros())
    assert con.execute("SELECT success_threshold()").fetchone()[0] == schema.SUCCESS_THRESHOLD
    assert schema.is_success(schema.SUCCESS_THRESHOLD, None)  # at the threshold: a success
    assert not schema.is_success(None, True)  # no judge score: never a success


def test_distill_scan_uses_the_macro():
    """distill's DuckDB scan (no views) gets the same macro, with the same answers."""
    con = fetch._connect([], None)
    for judge, fmt, threshold in GRID:
        got = con.execute("SELECT is_success(?, ?, ?)", [judge, fmt, threshold]).fetchone()[0]
        assert got is schema.is_success(judge, fmt, threshold), (judge, fmt, threshold)


def test_polars_expression_matches_the_python_rule():
    for threshold in (0.5, 1.0):
        rows = [(j, f) for j, f, t in GRID if t == threshold]
        df = pl.DataFrame(
            {"judge_score": [j for j, _ in rows], "format_ok": [f for _, f in rows]},
            schema={"judge_score": pl.Float64, "format_ok": pl.Boolean},
        )
        got = df.select(select.success_expr(threshold)).to_series().to_list()
        assert got == [schema.is_success(j, f, threshold) for j, f in rows], threshold


# A default threshold written as a number (``success_threshold: float = 1.0``), a Python restating
# of the rule (``judge >= x and format_ok``), or SQL binding the default by its number.
_SECOND_SPELLINGS = (
    re.compile(r"threshold\w*\s*:\s*[\w\s|\[\]]+=\s*\d"),
    re.compile(r"\bSUCCESS_THRESHOLD\s*=\s*\d"),
    re.compile(r"judge\w*\s*>=\s*(?!this\b)[\w.$]+\s+and\s+\S*format_ok"),
)
_SQL_DEFAULTS = re.compile(r"(is_success\([^)]*,|prompts_at\()\s*\d", re.I)


def test_no_second_spelling_in_the_library():
    found = []
    for name, path in modules().items():
        if name == "ddai.pipelines.records.success":
            continue  # the one Python definition
        code = "\n".join(
            ln
            for ln in path.read_text(encoding="utf-8").splitlines()
            if not ln.lstrip().startswith("#")
        )
        for pat in _SECOND_SPELLINGS:
            found += [(name, m.group(0)) for m in pat.finditer(code)]
    for f in resources.files("ddai.sql").iterdir():
        if f.name.endswith(".sql"):
            found += [(f.name, m.group(0)) for m in _SQL_DEFAULTS.finditer(f.read_text())]
    assert found == []
