"""``views_for``: a query over only the views it names answers exactly as over all of them; the
``turns`` view (an unnest over a projected subquery) keeps every turn and no turn-less rollout."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.query_table import connect_table
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import query

ROOT = Path(__file__).resolve().parents[3]

QUERIES = [
    "SELECT * FROM rollouts",
    "SELECT * FROM turns",
    "SELECT * FROM prompts",
    "SELECT * FROM prompts_at(0.5)",
    "SELECT * FROM runs",
    "SELECT * FROM discrepancies",
    "SELECT * FROM failure_attribution",
    "SELECT * FROM failure_attribution_at(0.5, 2, 1.0)",
    "SELECT * FROM reward_latency",
    "SELECT * FROM zero_variance_groups",
    "SELECT * FROM drop_keep",
    "SELECT r.uid, count(t.turn_idx) FROM rollouts r LEFT JOIN turns t USING (run_id, step, uid, rollout_idx) GROUP BY ALL",
]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    logs = tmp_path_factory.mktemp("store") / "logs"
    srcs = [str(p) for p in sorted((ROOT / "fixtures/logs").glob("*.jsonl"))]
    res = CliRunner().invoke(app, ["ingest", *srcs, "--logs", str(logs), "--no-progress"])
    assert res.exit_code == 0, res.output
    return logs


def _rows(con, sql):
    return sorted(map(repr, con.sql(sql).fetchall()))


@pytest.mark.parametrize("sql", QUERIES)
def test_only_the_named_views_answer_the_same(logs, sql):
    full = _rows(query.connect(logs), sql)
    lazy_views = query.views_for(sql)
    assert len(lazy_views) < len(query.VIEWS)
    assert _rows(query.connect(logs, views=lazy_views), sql) == full
    assert full  # the fixtures fill every view


def test_views_for_takes_the_dependencies():
    assert query.views_for("SELECT uid FROM rollouts") == ["rollouts"]
    assert query.views_for("select * from TURNS") == ["rollouts", "turns"]
    assert query.views_for("SELECT 1") == []
    need = query.views_for("SELECT * FROM drop_keep")
    assert need.index("rollouts") < need.index("zero_variance")


def test_turns_view_has_every_parsed_turn(logs):
    con = query.connect(logs)
    table = store.read_rollouts(logs)
    turns = table["turns"].to_pylist()
    want = sum(len(t) for t in turns if t)
    assert con.sql("SELECT count(*) FROM turns").fetchall()[0][0] == want > 0
    # per rollout, the turn indices in order, as stored
    got = dict(
        ((r, s, u, i), idx)
        for r, s, u, i, idx in con.sql(
            "SELECT run_id, step, uid, rollout_idx, list(turn_idx ORDER BY turn_idx) "
            "FROM turns GROUP BY ALL"
        ).fetchall()
    )
    for row, ts in zip(table.to_pylist(), turns, strict=True):
        key = (row["run_id"], row["step"], row["uid"], row["rollout_idx"])
        assert got.get(key) == ([t["idx"] for t in ts] if ts else None)


def test_no_progress_bar_on_stdout(logs):
    # DuckDB prints its progress bar to stdout on long queries; `ddai query` writes CSV there.
    for con in (query.connect(logs), connect_table(store.read_rollouts(logs))):
        assert con.sql("SELECT current_setting('enable_progress_bar')").fetchall() == [(False,)]


def test_views_for_skips_comments_but_not_strings():
    # a header saying "one row per prompt" must not bind the prompts views (and through them runs)
    assert query.views_for("-- per prompt, per runs\nSELECT uid FROM rollouts") == ["rollouts"]
    assert query.views_for("SELECT /* turns */ uid FROM rollouts") == ["rollouts"]
    # `--` inside a string literal is no comment: the view after it still counts
    assert query.views_for("SELECT '--' AS s, action FROM turns") == ["rollouts", "turns"]
    for name in ("funnel_prompt_metric", "funnel_prompt_scores"):
        assert query.views_for(query.sql_text(name)) == ["rollouts"]


@pytest.mark.parametrize("sql", QUERIES)
def test_shared_connection_answers_the_same(logs, sql):
    want = _rows(query.connect(logs), sql)
    con = query.connect(logs, shared=True, views=query.views_for(sql))
    try:
        assert _rows(con, sql) == want
    finally:
        con.close()


def test_shared_connections_keep_their_own_views(logs):
    runs = store.list_runs(logs)
    assert len(runs) >= 2
    a = query.connect(logs, [runs[0]], shared=True)
    b = query.connect(logs, [runs[1]], shared=True, views=["rollouts"])
    count = "SELECT DISTINCT run_id FROM rollouts"
    assert a.sql(count).fetchall() == [(runs[0],)]
    assert b.sql(count).fetchall() == [(runs[1],)]
    # views and macros are connection-local: b created only `rollouts`
    assert a.sql("SELECT count(*) FROM turns").fetchall()[0][0] > 0
    with pytest.raises(Exception, match="turns"):
        b.sql("SELECT count(*) FROM turns")
    a.close()  # closing one leaves the other (and the shared database) answering
    assert b.sql(count).fetchall() == [(runs[1],)]
    b.close()
    c = query.connect(logs, [runs[0]], shared=True, views=[])
    assert c.sql(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1"
    ).fetchall() == [("rollouts_src",)]
    c.close()


@pytest.mark.parametrize("sql", [*QUERIES, "SELECT * FROM rollouts WHERE false"])
def test_run_frame_is_the_arrow_frame(logs, sql):
    """run_frame hands DuckDB's result to polars without pyarrow: the same frame, column types
    (nested turns, maps, empty results) included."""
    import polars as pl
    from polars.testing import assert_frame_equal

    con = query.connect(logs)
    try:
        got = query.run_frame(con, sql)
        want = pl.from_arrow(query.run_sql(con, sql))
        assert got.height > 0 or "false" in sql
        # views without an ORDER BY come back in any order from one execution to the next
        assert_frame_equal(got, want, check_row_order=False)
    finally:
        con.close()
