"""A page with ``--browse-max 5000`` stays under 6 MB (issue 18): plotly.js once and packed, the
browser's rows packed, over a synthetic world large enough to fill all 5,000 rows."""

from __future__ import annotations

import re

import pytest
from report_world import browser_rows, page_figures

from ddai.pipelines.fixtures import make_world
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.reports import ReportConfig, build_report

pytestmark = pytest.mark.slow

LIMIT = 6_000_000


def test_browse_max_5000_stays_under_6_mb(tmp_path):
    world = tmp_path / "world"
    make_world(world, seed=0, size=300)  # 6,720 rollouts over the four runs
    logs = tmp_path / "logs"
    ingest(IngestConfig(sorted((world / "logs").glob("*.jsonl")), logs, progress=False))
    out = tmp_path / "r.html"
    res = build_report(
        ReportConfig(
            logs=logs,
            out=out,
            browse_max=5000,
            compare=("focused_r1", "focused_r2"),
            progress=False,
        )
    )
    html = out.read_text(encoding="utf-8")
    assert res["rollouts"] > 5000 and res["browser rows"] == 5000
    assert res["bytes"] == out.stat().st_size < LIMIT
    rows = browser_rows(html)
    assert len(rows) == 5000
    # the rows are whole transcripts (thinks, queries, observations), not a stub
    thinks = [t["think"] for r in rows for t in r["turns"] if t["think"]]
    assert len(thinks) > 5000 and sum(map(len, thinks)) > 1_000_000
    # one copy of plotly.js, no figure carrying its own
    assert len(re.findall(r'id="plotly-packed"', html)) == 1
    assert len(page_figures(html)) == html.count('class="plotly-graph-div"') >= 10
