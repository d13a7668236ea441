"""40 judged runs with long names, as Chromium draws the report: every chart drawn, no legend over
an axis title, a subplot title or a plot area, run names and uids never broken inside a table
cell, every table caption above its table."""

from __future__ import annotations

import pytest
from report_world import random_store
from test_report_browser import _open_in_chromium

from ddai.reports import ReportConfig, build_report

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LEGENDS = """(() => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {l: r.left, r: r.right, t: r.top, b: r.bottom}; };
  const clash = (p, q) => p.l < q.r - 1 && q.l < p.r - 1 && p.t < q.b - 1 && q.t < p.b - 1;
  const out = {legends: 0, clashes: [], outside: []};
  for (const div of document.querySelectorAll('div.plotly-graph-div')) {
    const svg = box(div.querySelector('svg.main-svg'));
    for (const legend of div.querySelectorAll('g.legend')) {
      out.legends += 1;
      const lb = box(legend.querySelector('rect.bg') || legend);
      if (lb.l < svg.l - 1 || lb.r > svg.r + 1) out.outside.push(div.id);
      const others = div.querySelectorAll(
        'g.infolayer text[class$="title"], g.annotation, rect.nsewdrag');
      for (const t of others) {
        if (t.tagName === 'text' && !t.textContent) continue;
        if (clash(lb, box(t)))
          out.clashes.push([div.id, t.getAttribute('class'), t.textContent]);
      }
    }
  }
  return out;
})()"""

TABLES = r"""(() => {
  const broken = [], below = [];
  for (const table of document.querySelectorAll('table.data')) {
    const cap = table.querySelector('caption'), head = table.querySelector('thead');
    if (cap && head && cap.getBoundingClientRect().top > head.getBoundingClientRect().top)
      below.push(cap.textContent);
    for (const td of table.querySelectorAll('td')) {
      const text = td.textContent.trim();
      if (!/^(flash_round\d_run_\d\d|p\d+)$/.test(text)) continue;
      const range = document.createRange();
      range.selectNodeContents(td);
      const lines = new Set(Array.from(range.getClientRects(), r => Math.round(r.top)));
      if (lines.size > 1) broken.push(text);
    }
  }
  return {broken, below, captions: document.querySelectorAll('table.data caption').length};
})()"""


def test_forty_runs_read_cleanly_in_chromium(tmp_path):
    logs = random_store(tmp_path, runs=40, prompts=4, n=2, name="flash_round1_run_{r:02d}")
    out = tmp_path / "r.html"
    build_report(
        ReportConfig(
            logs=logs,
            out=out,
            progress=False,
            browse_max=0,
            compare=("flash_round1_run_03", "flash_round1_run_10"),
        )
    )
    got = _open_in_chromium(out, tmp_path / "profile", {"legends": LEGENDS, "tables": TABLES})
    assert got["graphs"] >= 10 and got["drawn"] == got["graphs"] and got["errors"] == []
    legends = got["legends"]
    assert legends["legends"] >= 6
    assert legends["clashes"] == [] and legends["outside"] == []
    tables = got["tables"]
    assert tables["captions"] >= 3 and tables["below"] == []
    assert tables["broken"] == []
