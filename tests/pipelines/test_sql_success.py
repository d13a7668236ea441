"""Success is spelled once in SQL (the ``is_success`` macro, defined with the ``rollouts`` view) and
agrees with ``ddai.pipelines.schema.is_success``."""

from __future__ import annotations

import itertools
import re
from importlib import resources

import duckdb

from ddai.pipelines import query, schema


def test_macro_matches_the_python_rule():
    con = duckdb.connect()
    con.execute("CREATE TABLE rollouts_src (judge_score DOUBLE, format_ok BOOLEAN)")
    con.execute(query.sql_text("rollouts"))
    grid = itertools.product((None, 0.0, 0.5, 0.99, 1.0, 1.5), (None, True, False), (0.5, 1.0))
    for judge, fmt, threshold in grid:
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
