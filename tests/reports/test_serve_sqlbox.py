"""The SQL box: one SELECT, no writes, no file outside the store, whatever the statement."""

from __future__ import annotations

import duckdb
import pytest
from report_world import planted_store

from ddai.pipelines import query
from ddai.reports.serve.sqlbox import SqlRejected, check_select, lock_down, run_select


@pytest.fixture
def locked(tmp_path):
    logs = planted_store(tmp_path)
    con = query.connect(logs)
    lock_down(con, logs)
    yield con, logs
    con.close()


@pytest.mark.parametrize(
    "sql",
    ["SELECT 1", "with x as (select 2 as a) select a from x", "FROM rollouts", "  select 1;  "],
)
def test_check_select_accepts_one_select(sql):
    check_select(sql)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("INSERT INTO t VALUES (1)", "got INSERT"),
        ("DELETE FROM rollouts", "got DELETE"),
        ("CREATE TABLE t AS SELECT 1", "got CREATE"),
        ("COPY rollouts TO 'x.csv'", "got COPY"),
        ("ATTACH 'x.db' AS x", "got ATTACH"),
        ("SET enable_external_access = true", "got SET"),
        ("PRAGMA version", "got PRAGMA"),
        ("INSTALL httpfs", "got "),
        ("SELECT 1; SELECT 2", "one statement at a time, got 2"),
        ("SELEC 1", "does not parse"),
    ],
)
def test_check_select_rejects_everything_else(sql, message):
    with pytest.raises(SqlRejected, match=message):
        check_select(sql)


def test_views_answer_and_rows_are_capped(locked):
    con, _ = locked
    res = run_select(
        con, "SELECT run_id, count(*) AS n FROM rollouts GROUP BY 1 ORDER BY 1", max_rows=10
    )
    assert res == {
        "columns": ["run_id", "n"],
        "rows": [["base", 16], ["new", 8]],
        "truncated": False,
    }
    cut = run_select(con, "SELECT * FROM range(5)", max_rows=3)
    assert cut["rows"] == [[0], [1], [2]] and cut["truncated"] is True


def test_files_outside_the_store_stay_unread_and_unwritten(locked, tmp_path):
    con, logs = locked
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n42\n")
    for sql in (
        f"SELECT * FROM read_csv('{outside}')",
        f"SELECT * FROM '{outside}'",
        f"SELECT * FROM read_text('{outside}')",
        "SELECT * FROM glob('/etc/*')",
    ):
        with pytest.raises(SqlRejected):
            run_select(con, sql, max_rows=10)
    # the lock cannot be lifted, by a SET or by a SELECT
    with pytest.raises(SqlRejected, match="got SET"):
        run_select(con, "SET enable_external_access = true", max_rows=1)
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET enable_external_access = true")
    # the store itself stays readable (the views read it)
    part = next(logs.glob("run_id=base/*.parquet"))
    res = run_select(con, f"SELECT count(*) FROM read_parquet('{part}')", max_rows=1)
    assert res["rows"] == [[16]]


def test_a_long_query_is_interrupted(locked):
    con, _ = locked
    with pytest.raises(SqlRejected, match="ran longer than"):
        run_select(
            con,
            "SELECT count(*) FROM range(100000000) a, range(100000000) b WHERE a.range + b.range = 7",
            max_rows=1,
            timeout_s=0.2,
        )
    # the connection still answers afterwards
    assert run_select(con, "SELECT 1 AS one", max_rows=1)["rows"] == [[1]]
