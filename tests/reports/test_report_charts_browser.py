"""The funnel Sankey as Chromium draws it: no two node labels overlap, none leaves the figure.

A DDAI-shaped funnel (6,667 prompts → buckets B / A / 0 → round 1 → round 2) with long file names,
where a big bucket sits beside two small ones in one column: the case that piled labels up.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from report_world import planted_store
from test_report_browser import _open_in_chromium

from ddai.pipelines.store import manifest
from ddai.reports import ReportConfig, build_report

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LABELS = """(() => {
  const box = r => ({l: r.left, r: r.right, t: r.top, b: r.bottom});
  const svg = document.querySelector('#fig-funnel-sankey svg.main-svg').getBoundingClientRect();
  return {svg: box(svg), labels: Array.from(
    document.querySelectorAll('#fig-funnel-sankey .node-label'),
    t => ({text: t.textContent, ...box(t.getBoundingClientRect())}))};
})()"""


def _step(out: Path, n: int, step: str, inputs: dict[Path, int]) -> Path:
    pq.write_table(pa.table({"id": [f"train_{i}" for i in range(n)]}), out)
    rec = manifest.start(step, {"rule": step}, list(inputs))
    rec.rows_in, rec.rows_out = sum(inputs.values()), n
    rec.notes = {"contributions": {str(p): v for p, v in inputs.items()}}
    manifest.write(out, rec)
    return out


def _funnel(d: Path) -> None:
    d.mkdir()
    src = d / "slidevqa_train_6667_all_prompts.parquet"
    pq.write_table(pa.table({"id": [f"train_{i}" for i in range(6667)]}), src)
    b = _step(d / "bucket_B_mastered_prompts.parquet", 1263, "curate.bucket", {src: 1263})
    a = _step(d / "bucket_A_edge_of_competence.parquet", 4767, "curate.bucket", {src: 4767})
    z = _step(d / "bucket_0_unsolvable_for_now.parquet", 637, "curate.bucket", {src: 637})
    hard = _step(d / "hard_A_at_most_0.3.parquet", 120, "curate.focus", {a: 120})
    r1 = _step(d / "focused_round1_prompts.parquet", 702, "curate.focus", {hard: 120, z: 582})
    _step(d / "focused_round2_prompts.parquet", 352, "curate.focus", {r1: 352})
    del b


def _overlap(p: dict, q: dict) -> bool:
    return p["l"] < q["r"] and q["l"] < p["r"] and p["t"] < q["b"] and q["t"] < p["b"]


def test_sankey_labels_do_not_overlap(tmp_path):
    logs = planted_store(tmp_path / "w")
    _funnel(tmp_path / "curated")
    out = tmp_path / "r.html"
    build_report(
        ReportConfig(
            logs=logs, out=out, datasets_dir=tmp_path / "curated", browse_max=0, progress=False
        )
    )
    got = _open_in_chromium(out, tmp_path / "profile", {"sankey": LABELS})
    assert got["drawn"] == got["graphs"] and got["errors"] == []
    svg, labels = got["sankey"]["svg"], got["sankey"]["labels"]
    assert len(labels) == 7 and all(x["r"] > x["l"] for x in labels)
    assert any("6,667 rows" in x["text"] for x in labels)
    # 5 columns 240 px apart fit 15 characters a label: 5 of the start, 9 of the end (where the
    # files of one funnel differ)
    assert "bucke…ompetence4,767 rows" in [x["text"] for x in labels]
    clashes = [
        (p["text"], q["text"])
        for i, p in enumerate(labels)
        for q in labels[i + 1 :]
        if _overlap(p, q)
    ]
    assert clashes == [], labels
    # every label inside the figure (none cut off at an edge)
    outside = [
        x["text"]
        for x in labels
        if not (
            svg["l"] <= x["l"] and x["r"] <= svg["r"] and svg["t"] <= x["t"] and x["b"] <= svg["b"]
        )
    ]
    assert outside == [], (svg, [x for x in labels if x["text"] in outside])
