"""The report's round analyses read its materialized facts (sql/report_analysis_sources.sql), not
the log's page lists and text columns, and give the same rows as the views over the log.

Both sides run on the same seeded store (pages with and without a golden one, missing judge
scores and rewards, two steps per prompt) and on the hand-planted analysis world.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddai.pipelines.store import query, write_run
from ddai.reports import ReportConfig
from ddai.reports.context import ReportContext

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines" / "analyses"))
import analysis_world
from report_world import random_store

VIEWS = (
    "SELECT * FROM failure_attribution",
    "SELECT * FROM failure_attribution_at(0.5, 2, 0.5)",
    "SELECT * FROM zero_variance_groups",
    "SELECT * FROM drop_keep",
)


def _stores(root: Path) -> list[Path]:
    planted, _flags = analysis_world.planted_store(root / "planted")
    return [random_store(root / "random", runs=2, prompts=40), planted]


def test_report_sources_give_the_log_views_rows(tmp_path: Path) -> None:
    rows = dict.fromkeys(VIEWS, 0)
    for logs in _stores(tmp_path):
        plain = query.connect(logs)
        con = query.connect(logs)
        ReportContext.open(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False), con)
        for sql in VIEWS:
            want = plain.execute(sql).fetchall()
            assert con.execute(sql).fetchall() == want, (logs, sql)
            rows[sql] += len(want)
    assert all(rows.values()), rows  # no view compared over empty results only


def test_report_sources_read_no_page_list_and_drop_keep_no_log(tmp_path: Path) -> None:
    logs = random_store(tmp_path, runs=1, prompts=10)
    con = query.connect(logs)

    def plan(sql: str) -> str:
        return "\n".join(r[1] for r in con.execute("EXPLAIN " + sql).fetchall())

    before = plan("SELECT * FROM failure_attribution")
    assert "retrieved_pages" in before and "PARQUET_SCAN" in plan("SELECT * FROM drop_keep")
    ReportContext.open(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False), con)
    for sql in VIEWS[:2]:  # the attribution reads the answers beside the facts, no page list
        assert "retrieved_pages" not in plan(sql) and "reference_pages" not in plan(sql), sql
    for sql in VIEWS[2:]:  # drop/keep reads the report's tables only
        assert "PARQUET_SCAN" not in plan(sql), sql


def test_report_carries_are_the_logs(tmp_path: Path) -> None:
    """The attribution's up-front check counts from the report's tables (kept turn facts) what
    sql/analysis_carries.sql counts over the log, run by run."""
    seen: list[dict] = []
    # null, empty and filled page lists; a latency that is no number; a rollout alone in its group
    edge = tmp_path / "edge"
    pages = [None, [], ["d_1"]]
    write_run(
        edge,
        "e",
        [
            {
                "uid": f"u{i % 4}",
                "rollout_idx": i,
                "step": 1,
                "judge_score": 1.0 if i != 5 else None,
                "retrieved_pages": pages[i % 3],
                "reference_pages": pages[(i // 3) % 3],
                "extra": {"latency_s": "slow" if i % 4 == 1 else i} if i % 2 else None,
            }
            for i in range(9)
        ],
    )
    for logs in [*_stores(tmp_path), edge]:
        plain = query.connect(logs)
        con = query.connect(logs)
        ReportContext.open(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False), con)
        want = query.run_named(plain, "analysis_carries").to_pylist()
        assert query.run_named(con, "report_carries").to_pylist() == want, logs
        seen += want
    # the counts compared differ from the rollout count somewhere, and latency is logged
    assert any(r["with_retrieved"] < r["rollouts"] for r in seen), seen
    assert any(r["with_reference"] < r["rollouts"] for r in seen), seen
    assert any(0 < r["with_latency"] < r["rollouts"] for r in seen), seen
    assert any(r["judged"] < r["rollouts"] for r in seen), seen
    assert all(r["groups"] > 0 for r in seen), seen
