"""``ServeConfig.report_fields``: the explorer's ``/report`` gets the store, runs and thresholds
the explorer was started with, and nothing of the server's own (host, port, token, paging)."""

from __future__ import annotations

from pathlib import Path

from ddai.reports.config import ReportConfig
from ddai.reports.serve.config import ServeConfig


def test_report_fields_carry_the_shared_flags_and_no_server_settings(tmp_path):
    cfg = ServeConfig(
        logs=tmp_path, runs=["a"], judge_high=0.7, ndcg_low=0.1, max_turns=5, threads=2
    )
    got = cfg.report_fields()
    assert got == {
        "logs": Path(tmp_path),
        "runs": ["a"],
        "datasets_dir": None,
        "success_threshold": 1.0,
        "judge_high": 0.7,
        "ndcg_low": 0.1,
        "judge_low": 0.0,
        "ndcg_high": 1.0,
        "max_turns": 5,
        "threads": 2,
    }
    report = ReportConfig(out=tmp_path / "r.html", progress=False, **got)
    assert (report.judge_high, report.max_turns, report.runs) == (0.7, 5, ["a"])
