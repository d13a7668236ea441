"""The SQL box: one SELECT, no writes, no file outside the store, whatever the statement; a
private spill folder and a memory limit that is a share of the machine."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from report_world import planted_store
from serve_world import local, post_sql

from ddai.pipelines.store import query
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.config import machine_memory
from ddai.reports.serve.sqlbox import (
    SqlRejected,
    check_select,
    lock_down,
    run_select,
    spill_to,
)


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


@pytest.fixture
def cwd_note(tmp_path, monkeypatch):
    """A working directory whose ``.tmp`` (DuckDB's default temp folder) holds a private note."""
    work = tmp_path / "work"
    (work / ".tmp").mkdir(parents=True)
    (work / ".tmp" / "note.txt").write_text("private\n")
    monkeypatch.chdir(work)
    return work / ".tmp" / "note.txt"


def test_the_sql_box_reads_no_temp_folder_of_the_working_directory(tmp_path, cwd_note):
    # Before: DuckDB's temp folder defaulted to .tmp under the working directory, and DuckDB
    # keeps its temp folder readable whatever the allow-list says.
    logs = planted_store(tmp_path / "store")
    client = local(create_app(ServeConfig(logs=logs)))
    for sql in (
        "SELECT content FROM read_text('.tmp/note.txt')",
        f"SELECT content FROM read_text('{cwd_note}')",
        "SELECT count(*) FROM glob('.tmp/*')",
    ):
        res = post_sql(client, json={"sql": sql})
        assert res.status_code == 400 and "private" not in res.text, sql
    temp = post_sql(client, json={"sql": "SELECT current_setting('temp_directory')"}).json()
    spill = Path(temp["rows"][0][0])
    # a private folder of its own, outside the store and the working directory
    assert spill.is_absolute() and spill.name.startswith("ddai-serve-")
    assert not spill.is_relative_to(logs) and not spill.is_relative_to(cwd_note.parent.parent)
    assert [p.name for p in spill.iterdir()] == []  # nothing but DuckDB's own spill ever


def test_lock_down_stops_spilling_into_the_default_temp_folder(locked, cwd_note):
    con, _ = locked
    assert con.sql("SELECT current_setting('temp_directory')").fetchall() == [("",)]
    with pytest.raises(SqlRejected, match="disabled by configuration"):
        run_select(con, "SELECT content FROM read_text('.tmp/note.txt')", max_rows=1)


def test_spill_folder_inside_the_store_is_refused(tmp_path):
    logs = planted_store(tmp_path)
    con = duckdb.connect()
    with pytest.raises(ValueError, match="overlaps the store"):
        spill_to(con, logs / "tmp", logs)
    with pytest.raises(ValueError, match="overlaps the store"):
        spill_to(con, tmp_path, logs)
    con.close()


def test_the_memory_limit_is_the_configured_share_of_the_machine(tmp_path):
    # Before: DuckDB's default, 80% of the machine (18.8 GiB of 23 GB) for one SQL box query.
    logs = planted_store(tmp_path)
    total = machine_memory()
    assert total and total > 2**30
    setting = "SELECT current_setting('memory_limit')"
    for share in (None, 0.3):
        cfg = (
            ServeConfig(logs=logs) if share is None else ServeConfig(logs=logs, memory_share=share)
        )
        got = post_sql(local(create_app(cfg)), json={"sql": setting}).json()["rows"][0][0]
        # DuckDB's own rendering of the same number of bytes is the reference
        ref = duckdb.connect()
        ref.execute("SET memory_limit = $m", {"m": f"{int(total * (share or 0.25))}B"})
        assert got == ref.sql(setting).fetchall()[0][0]
        ref.close()


def test_a_query_past_the_memory_limit_fails_alone(tmp_path):
    logs = planted_store(tmp_path)
    share = 32 * 2**20 / machine_memory()  # 32 MiB
    client = local(create_app(ServeConfig(logs=logs, memory_share=share)))
    hungry = "SELECT max(len(l)) FROM (SELECT list(range) AS l FROM range(20000000))"
    res = post_sql(client, json={"sql": hungry})
    assert res.status_code == 400 and "Out of Memory" in res.json()["error"]
    ok = post_sql(client, json={"sql": "SELECT count(*) FROM explorer"})
    assert ok.json()["rows"] == [[24]]
    assert client.get("/api/rollouts").json()["total"] == 24


@pytest.mark.parametrize("share", [0, -0.1, 0.95, float("nan")])
def test_a_memory_share_outside_its_range_is_refused(tmp_path, share):
    with pytest.raises(ValueError, match="--memory-share"):
        ServeConfig(logs=tmp_path, memory_share=share)
