"""The report in a real browser: headless Chromium over the DevTools protocol.

Asserts that every plotly figure rendered (``svg.main-svg`` inside each graph div), that the page
requested nothing from the network, raised no script error and opened no dialog, that a click
opens a transcript, and that a ``<script>`` planted in a think is shown as text.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from chromium import chromium, open_page
from report_world import XSS, XSS_ANSWER, planted_store
from support.page_data import downloads

from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.reports import ReportConfig, build_report

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAUSES = ("wrong_gt", "generator_bottleneck", "search_failure")

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def open_matching(needle: str) -> str:
    """A probe: search the browser for ``needle``, open every shown row's transcript, and report
    the transcripts (the browser builds them only when opened)."""
    return f"""(() => {{
  const q = document.getElementById('browser-q');
  q.value = {json.dumps(needle)};
  q.dispatchEvent(new Event('input'));
  const rows = Array.from(document.querySelectorAll('tr.traj'));
  rows.forEach(r => r.click());
  const txs = rows.map(r => r.nextElementSibling);
  return {{ready: document.getElementById('browser-table').dataset.ready, rows: rows.length,
          thinks: txs.flatMap(t => Array.from(t.querySelectorAll('.think'), x => x.textContent)),
          answers: txs.map(t => t.querySelector('.answer').textContent),
          html: txs.map(t => t.innerHTML).join('')}};
}})()"""


OPEN_PLANTED = open_matching("alert(1)")
FILTER_CLASS = """(() => {
  const q = document.getElementById('browser-q');
  q.value = '';
  const s = document.getElementById('browser-tag');
  s.value = 'retrieval_ok_answer_wrong';
  s.dispatchEvent(new Event('input'));
  const shown = Array.from(document.querySelectorAll('tr.traj'));
  return {count: document.getElementById('browser-count').textContent,
          uids: shown.map(r => r.children[2].textContent)};
})()"""
GRAPHS = "document.querySelectorAll('div.plotly-graph-div')"
DRAWN = f"Array.from({GRAPHS}).filter(d => d.querySelector('svg.main-svg')).length"


async def _drive(url: str, port: int, probes: dict[str, str]) -> dict[str, Any]:
    """Load ``url``, wait until every plotly graph has drawn, then evaluate ``probes`` in order."""
    async with open_page(port) as page:
        await page.goto(url)
        for _ in range(300):  # plotly draws right after load
            n_graphs, n_drawn = await page.eval(f"[{GRAPHS}.length, {DRAWN}]")
            if n_drawn == n_graphs:
                break
            await asyncio.sleep(0.1)
        out: dict[str, Any] = {
            "graphs": n_graphs,
            "drawn": n_drawn,
            "main_svgs": await page.eval("document.querySelectorAll('svg.main-svg').length"),
            "scripts": await page.eval("document.scripts.length"),
        }
        for name, expression in probes.items():
            out[name] = await page.eval(expression)
        out["scripts_after"] = await page.eval("document.scripts.length")
        await asyncio.sleep(0.2)  # let any late request or dialog event arrive
        out.update(requests=page.requests, dialogs=page.dialogs, errors=page.errors)
        return out


def _open_in_chromium(html: Path, profile: Path, probes: dict[str, str]) -> dict[str, Any]:
    with chromium(profile) as port:
        return asyncio.run(asyncio.wait_for(_drive(html.as_uri(), port, probes), 120))


def test_report_renders_offline_in_chromium(tmp_path):
    logs = planted_store(tmp_path)
    out = tmp_path / "report.html"
    build_report(ReportConfig(logs=logs, out=out, compare=("base", "new"), progress=False))
    text = out.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.IGNORECASE)

    got = _open_in_chromium(
        out, tmp_path / "profile", {"opened": OPEN_PLANTED, "filtered": FILTER_CLASS}
    )

    # every figure drew its SVG: at least 11 (overview 1, outcomes 3, judge/NDCG 2,
    # hallucination 1, behaviour 3, comparison 1; no funnel datasets given), all in the file
    assert got["graphs"] == text.count('class="plotly-graph-div"') >= 11
    assert got["drawn"] == got["graphs"]
    assert got["main_svgs"] >= got["graphs"]
    # nothing but the file itself (and inline data: URIs) was requested
    assert [u for u in got["requests"] if not u.startswith(("file:", "data:"))] == []
    assert got["dialogs"] == [] and got["errors"] == []
    # the planted script is text: visible as written, escaped in the markup, never run
    opened = got["opened"]
    assert opened["ready"] == "true" and opened["rows"] == 1
    assert any(XSS in t for t in opened["thinks"])
    assert XSS_ANSWER in opened["answers"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in opened["html"]
    # packed plotly.js and the plotly.js it unpacked, one JSON per figure, the stats JSON, the
    # page's code and the browser's packed rows; opening transcripts adds none
    assert got["scripts_after"] == got["scripts"] == 2 + got["graphs"] + 3
    assert got["filtered"]["uids"] == ["u1"]
    assert got["filtered"]["count"] == "1 of 24 shown"


def test_fixture_world_report_runs_no_planted_markup(tmp_path):
    """The committed world plants ``<script>document.title='x'</script>`` and an ``<img onerror=
    "alert(1)">`` in thinks: the title stays, no dialog opens, the text is there to read."""
    logs = tmp_path / "logs"
    ingest(IngestConfig(sorted((FIXTURES / "logs").glob("*.jsonl")), logs, progress=False))
    out = tmp_path / "report.html"
    build_report(
        ReportConfig(
            logs=logs, out=out, compare=("focused_r1", "focused_r2"), title="T", progress=False
        )
    )
    got = _open_in_chromium(
        out,
        tmp_path / "profile",
        {
            "title": "document.title",
            "planted": open_matching("<script>document.title='x'</script>"),
            "images": "document.images.length",
        },
    )
    assert got["graphs"] > 0 and got["drawn"] == got["graphs"]
    assert got["title"] == "T"
    planted = got["planted"]
    assert planted["rows"] >= 1 and got["images"] == 0
    assert sum("<script>document.title='x'</script>" in t for t in planted["thinks"]) >= 1
    assert [u for u in got["requests"] if not u.startswith(("file:", "data:"))] == []
    assert got["dialogs"] == [] and got["errors"] == []


def test_harness_sees_dialogs_and_network_loads(tmp_path):
    """The checks above can fail: a page that loads a remote script and runs one alert is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><head><script src="http://127.0.0.1:9/x.js"></script></head>'
        "<body><script>alert('planted')</script></body></html>",
        encoding="utf-8",
    )
    got = _open_in_chromium(page, tmp_path / "profile", {})
    assert got["dialogs"] == ["planted"]
    assert "http://127.0.0.1:9/x.js" in got["requests"]


CLICK_PARTS = """Array.from(document.querySelectorAll('a[data-slice-of]'), (a) => {
  a.click();
  return a.getAttribute('download');
})"""


def test_cause_lists_are_cut_from_the_whole_list_in_the_page(tmp_path):
    """Each cause's download is its stretch of the whole attribution list, which the page
    carries once: clicking it in Chromium gives the header and exactly that cause's rows."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines" / "analyses"))
    from analysis_world import planted_store as analyses_store

    logs, flags = analyses_store(tmp_path)
    out = tmp_path / "report.html"
    build_report(ReportConfig(logs=logs, out=out, flags=[flags], progress=False))
    html = out.read_text(encoding="utf-8")
    assert html.count("data-slice-of=") == 3  # the three causes, no data URL of their own

    saved = tmp_path / "saved"
    saved.mkdir()

    async def drive(port: int) -> list[str]:
        async with open_page(port) as page:
            await page.send("Page.setDownloadBehavior", behavior="allow", downloadPath=str(saved))
            await page.goto(out.as_uri())
            names = await page.eval(CLICK_PARTS)
            for _ in range(100):  # the browser writes each file after the click
                if all((saved / n).exists() for n in names):
                    break
                await asyncio.sleep(0.1)
            return names

    with chromium(tmp_path / "profile") as port:
        clicked = asyncio.run(asyncio.wait_for(drive(port), 120))
    got = {n: (saved / n).read_text(encoding="utf-8") for n in clicked}

    texts = downloads(html)
    whole = list(csv.DictReader(io.StringIO(texts["failure_attribution.csv"])))
    assert sorted(got) == [f"attribution_{c}.csv" for c in sorted(CAUSES)]
    for cls in CAUSES:
        name = f"attribution_{cls}.csv"
        assert got[name] == texts[name]  # the page cuts what the Python reading says
        assert list(csv.DictReader(io.StringIO(got[name]))) == [
            r for r in whole if r["class"] == cls
        ]
