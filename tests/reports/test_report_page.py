"""The HTML file itself: self-contained, escaped, bounded, written atomically, reproducible."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from plotly.offline import get_plotlyjs
from report_world import XSS, XSS_ANSWER, browser_rows, page_figures, planted_store
from support.page_data import unpacked

from ddai.pipelines import store
from ddai.pipelines.store import manifest
from ddai.reports import ReportConfig, build_report


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return planted_store(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def built(logs, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report.html"
    res = build_report(ReportConfig(logs=logs, out=out, compare=("base", "new"), progress=False))
    return res, out.read_text(encoding="utf-8")


class _Outline(HTMLParser):
    """Section ids and headings, script elements (with their attributes) and the stats JSON."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.headings: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.stats = ""
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a["id"])
        elif tag == "h2":
            self._in = "h2"
            self.headings.append("")
        elif tag == "script":
            self.scripts.append(a)
            self._in = "stats" if a.get("id") == "report-stats" else None

    def handle_endtag(self, tag):
        if tag in ("h2", "script"):
            self._in = None

    def handle_data(self, data):
        if self._in == "h2":
            self.headings[-1] += data
        elif self._in == "stats":
            self.stats += data


CORE = {
    "overview": "Overview",
    "funnel": "Funnel",
    "outcomes": "Per-prompt outcomes",
    "judge-ndcg": "Judge vs NDCG",
    "hallucination": "Hallucination suspects",
    "behaviour": "Search behaviour",
    "compare": "Run comparison",
    "browser": "Trajectory browser",
}
FIGURES = (
    "fig-overview-termination",
    "fig-outcomes-success-hist",
    "fig-outcomes-bands",
    "fig-outcomes-zero-variance",
    "fig-judge-ndcg-heatmap",
    "fig-judge-ndcg-classes",
    "fig-hallucination-share",
    "fig-behaviour-actions",
    "fig-behaviour-golden-rank",
    "fig-behaviour-turns",
    "fig-compare-distributions",
)


def test_sections_in_order_each_with_a_reading(built):
    # more sections may be plugged in; these eight keep their order and their numbering
    _, html = built
    p = _Outline()
    p.feed(html)
    assert [s for s in p.sections if s in CORE] == list(CORE)
    numbered = dict(zip(p.sections, p.headings, strict=True))
    assert [numbered[s] for s in CORE] == [
        f"{p.sections.index(s) + 1}. {title}" for s, title in CORE.items()
    ]
    assert html.count('<p class="reading">') == len(p.sections)


def test_self_contained_plotly_embedded_once(built):
    _, html = built
    p = _Outline()
    p.feed(html)
    assert all("src" not in s for s in p.scripts)
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.IGNORECASE)
    # plotly.js once, packed: it unpacks to plotly.js exactly, and no figure carries code
    packed = re.findall(
        r'<script type="application/octet-stream" id="plotly-packed"[^>]*>([^<]*)<', html
    )
    assert len(packed) == 1 and unpacked(packed[0]) == get_plotlyjs()
    assert get_plotlyjs()[:2000] not in html and 'Plotly.newPlot("' not in html
    # figures are an empty div and their JSON, each with a stable id
    assert all(html.count(f'id="{f}"') == 1 for f in FIGURES)
    assert html.count('class="plotly-graph-div"') == len(page_figures(html)) >= len(FIGURES)
    # the CSP forbids every network load
    assert "default-src 'none'" in html


def test_stats_json_matches_the_build(built):
    res, html = built
    p = _Outline()
    p.feed(html)
    assert json.loads(p.stats) == json.loads(json.dumps(res["stats"]))


def test_model_text_is_escaped(built):
    _, html = built
    assert XSS not in html and XSS_ANSWER not in html
    # the browser's rows carry it as plain data, which the page script only sets as text (the
    # Chromium test shows it rendered as text, never run)
    rows = browser_rows(html)
    planted = next(r for r in rows if r["answer"] == XSS_ANSWER)
    assert any(XSS in t["think"] for t in planted["turns"])


def test_visible_numbers(built):
    _, html = built
    # the overview's total row and the browser's count, as the reader sees them
    assert re.search(r"<td>all runs</td><td>5</td><td>24</td><td>50\.0%</td>", html)
    assert '<span id="browser-count" class="count">24 shown</span>' in html
    assert len(browser_rows(html)) == 24


def test_browse_max_samples_every_stratum_first(logs, tmp_path):
    cfg = dict(logs=logs, out=tmp_path / "r.html", progress=False, browse_max=8)
    res = build_report(ReportConfig(**cfg))
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert res["browser rows"] == 8 and len(browser_rows(html)) == 8
    rows = [(r["run_id"], r["outcome"], " ".join(r["tags"])) for r in browser_rows(html)]
    # 8 rows from 8 different (run, outcome, first class) strata: no stratum repeats before all
    # have one (the planted world has 13)
    strata = {(run, outcome, tags.split(" ")[0]) for run, outcome, tags in rows}
    assert len(strata) == 8
    # and the first of them cover all 7 (run, outcome) pairs: base success, failure,
    # format_fail; new success, failure, format_fail, unjudged
    assert len({(run, outcome) for run, outcome, _ in rows}) == 7
    again = build_report(ReportConfig(**cfg))
    assert again["stats"]["browser"] == res["stats"]["browser"]
    assert len(browser_rows((tmp_path / "r.html").read_text(encoding="utf-8"))) == 8


def test_text_max_cuts_long_text(logs, tmp_path):
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False, text_max=5))
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    thinks = {t["think"] for r in browser_rows(html) for t in r["turns"]}
    # the think "s <script>alert(1)</script> s" (2 + 25 + 2 = 29 characters) keeps 5
    assert "s <sc… [24 more characters]" in thinks


def test_size_is_bounded_without_the_browser(logs, tmp_path):
    res = build_report(
        ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False, browse_max=0)
    )
    assert res["browser rows"] == 0
    assert res["bytes"] < len(get_plotlyjs()) + 250_000


def test_written_atomically_and_reproducibly(logs, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old", encoding="utf-8")
    build_report(ReportConfig(logs=logs, out=out, progress=False))
    first = out.read_text(encoding="utf-8")
    build_report(ReportConfig(logs=logs, out=out, progress=False))
    second = out.read_text(encoding="utf-8")
    # no temp file left; the manifest commits the page and records its hash
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.html.manifest.json"]
    assert manifest.verify(out) is None
    out.write_text(second + " ", encoding="utf-8")
    assert manifest.verify(out) is not None  # a changed page no longer matches its manifest
    stamp = re.compile(r"generated [0-9-]+ [0-9:]+ UTC")
    assert stamp.sub("", first) == stamp.sub("", second)


def test_bad_inputs_name_the_fix(logs, tmp_path):
    out = tmp_path / "r.html"
    with pytest.raises(FileNotFoundError, match="ingest logs first"):
        build_report(ReportConfig(logs=tmp_path / "nope", out=out))
    with pytest.raises(FileNotFoundError, match="known runs: base, new"):
        build_report(ReportConfig(logs=logs, out=out, runs=["zzz"]))
    with pytest.raises(ValueError, match=r"--compare run\(s\) zzz not in the log store"):
        build_report(ReportConfig(logs=logs, out=out, compare=("base", "zzz")))
    with pytest.raises(FileNotFoundError, match="--datasets file"):
        build_report(ReportConfig(logs=logs, out=out, datasets=[tmp_path / "x.parquet"]))
    empty = tmp_path / "empty"
    store.write_run(empty, "r0", [])
    with pytest.raises(ValueError, match="no rollouts"):
        build_report(ReportConfig(logs=empty, out=out))
    assert not out.exists()


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"success_threshold": 1.5}, "--success-threshold must be in"),
        ({"judge_low": 0.6, "judge_high": 0.5}, "--judge-low"),
        ({"compare": ("a", "a")}, "two different run ids"),
        ({"compare": ("a", "b"), "runs": ["a"]}, "not among --run"),
        ({"max_turns": 0}, "--max-turns"),
        ({"browse_max": -1}, "--browse-max"),
        ({"out": "report.txt"}, "should end in .html"),
    ],
)
def test_config_rejects(kw, msg, tmp_path):
    args = {"logs": tmp_path, "out": tmp_path / "r.html", **kw}
    with pytest.raises(ValueError, match=msg):
        ReportConfig(**args)


def test_rows_with_only_ids_still_make_every_section(tmp_path):
    # no scores, turns or pages at all: every section renders with its empty-state numbers
    logs = tmp_path / "logs"
    store.write_run(logs, "bare", [{"uid": f"u{i % 3}", "rollout_idx": i} for i in range(6)])
    res = build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    assert set(CORE) <= set(res["sections"]) and (res["prompts"], res["rollouts"]) == (3, 6)
    st = res["stats"]
    assert st["overview"]["total"]["judged"] == 0 and st["overview"]["total"]["unknown"] == 6
    assert st["behaviour"]["runs"]["bare"]["rollouts"] == 0  # no parsed turns to measure
    assert st["outcomes"]["success_hist"] == {} and st["judge-ndcg"]["discrepancies"] == {}
    assert st["browser"]["shown"] == 6
    # the summary names what was drawn from nothing, with what the page says of it
    empty = res["sections without data"]
    assert "value" in empty and "ddai train value" in empty["value"]
    assert "evaluation" in empty and "ddai eval" in empty["evaluation"]
    assert "browser" not in empty and "overview" not in empty
