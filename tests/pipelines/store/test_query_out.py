"""A query's result shown and written by DuckDB alone: Parquet (exact integer sums), CSV (formula
cells escaped, nulls empty), JSON lines, a preview; each query runs once."""

from __future__ import annotations

import io as std_io
import json
from decimal import Decimal

import duckdb
import pyarrow.parquet as pq
import pytest

from ddai.pipelines.store import query_out

SQL = (
    "SELECT * FROM (VALUES ('a', 1, NULL, '=HYPERLINK(1)'), ('b', 2, 0.5, '-3'), "
    "('a', 4, 1.5, 'plain')) t(k, n, x, text)"
)


@pytest.fixture
def con():
    c = duckdb.connect()
    yield c
    c.close()


def test_parquet_keeps_integer_sums_exact_and_counts_rows(con, tmp_path):
    out = tmp_path / "o.parquet"
    rel = con.sql(f"SELECT k, sum(n) AS total, count(*) AS rows FROM ({SQL}) GROUP BY k ORDER BY k")
    assert query_out.write_parquet(con, rel, out) == 2
    table = pq.read_table(out)
    assert str(table.schema.field("total").type) == "decimal128(38, 0)"  # not a double
    assert table.to_pylist() == [
        {"k": "a", "total": Decimal(5), "rows": 2},
        {"k": "b", "total": Decimal(2), "rows": 1},
    ]
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "ZSTD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.parquet"]  # no temp file left


def test_parquet_of_no_result_is_refused_and_writes_nothing(con, tmp_path):
    with pytest.raises(ValueError, match="no result"):
        query_out.write_parquet(con, None, tmp_path / "o.parquet")
    assert list(tmp_path.iterdir()) == []


def test_csv_escapes_formula_cells_and_leaves_nulls_empty(con):
    result = query_out.materialize(con, con.sql(SQL))
    assert (result.columns, result.num_rows) == (["k", "n", "x", "text"], 3)
    buf = std_io.StringIO()
    query_out.write_csv(con, result, buf)
    assert buf.getvalue().splitlines() == [
        "k,n,x,text",
        "a,1,,'=HYPERLINK(1)",
        "b,2,0.5,-3",  # a number is no formula
        "a,4,1.5,plain",
    ]


def test_json_lines_give_maps_as_objects_and_sums_as_numbers(con):
    rel = con.sql("SELECT MAP {'judge': 0.5::DOUBLE} AS parts, sum(n) AS s FROM range(4) r(n)")
    buf = std_io.StringIO()
    query_out.write_json_lines(con, query_out.materialize(con, rel), buf)
    assert [json.loads(line) for line in buf.getvalue().splitlines()] == [
        {"parts": {"judge": 0.5}, "s": 6}
    ]


def test_preview_is_the_first_rows_in_order_and_batches_cover_all(con, monkeypatch):
    monkeypatch.setattr(query_out, "BATCH_ROWS", 7)
    result = query_out.materialize(con, con.sql("SELECT n FROM range(100) r(n) ORDER BY n DESC"))
    assert result.num_rows == 100
    assert query_out.preview(con, result, 3) == [{"n": 99}, {"n": 98}, {"n": 97}]
    assert [r[0] for r in query_out.rows(con, result)] == list(range(99, -1, -1))


def test_a_statement_without_result_has_no_rows(con):
    # DuckDB answers DDL with an empty ``Count`` relation (older versions: None)
    for rel in (None, con.sql("CREATE TABLE t (a INT)")):
        result = query_out.materialize(con, rel)
        assert (result.num_rows, list(query_out.rows(con, result))) == (0, [])
