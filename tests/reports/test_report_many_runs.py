"""The report over any number of runs: 1, 15, 16 and 40 judged runs build (16 crashed plotly's
subplot grid once), every chart is drawn, and a run keeps one colour across the page's charts.

Traces are matched to their runs by name: a run's trace is named after it (``run7``,
``run7 (4 prompts)``, ``run7: success``); ``run1`` and ``run10`` stay apart by the separator.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from report_world import page_figures, random_store
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.reports import ReportConfig, build_report

runner = CliRunner()

PER_RUN_FIGURES = {
    "fig-outcomes-success-hist",
    "fig-outcomes-bands",
    "fig-behaviour-actions",
    "fig-behaviour-golden-rank",
    "fig-behaviour-turns",
    "fig-compare-distributions",
}
"""Charts with one coloured trace (or more) per run in the random world."""


def _run_of(name: str, runs: list[str]) -> str | None:
    for run in runs:
        if name == run or name.startswith((f"{run} ", f"{run}:")):
            return run
    return None


def _color(trace: dict[str, Any]) -> str | None:
    c = (trace.get("marker") or {}).get("color") or (trace.get("line") or {}).get("color")
    return c if isinstance(c, str) else None


def run_colors_by_figure(
    figs: dict[str, dict[str, Any]], runs: list[str]
) -> dict[str, dict[str, set[str]]]:
    """Figure id → run → the colours that run's traces have in it (figures with run traces)."""
    out: dict[str, dict[str, set[str]]] = {}
    for fid, fig in figs.items():
        for t in fig["data"]:
            run = _run_of(t.get("name") or "", runs)
            if run is not None and _color(t) is not None:
                out.setdefault(fid, {}).setdefault(run, set()).add(_color(t))
    return out


@pytest.fixture(scope="module")
def forty(tmp_path_factory):
    root = tmp_path_factory.mktemp("forty")
    logs = random_store(root, runs=40, prompts=4, n=2)
    out = root / "r.html"
    res = build_report(
        ReportConfig(logs=logs, out=out, progress=False, browse_max=0, compare=("run3", "run10"))
    )
    return res, page_figures(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("n_runs", [1, 15, 16])
def test_report_builds_at_any_number_of_runs(tmp_path, n_runs):
    logs = random_store(tmp_path, runs=n_runs, prompts=3, n=2)
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", "--logs", str(logs), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.output)["runs"]) == n_runs
    figs = page_figures(out.read_text(encoding="utf-8"))
    heat = figs["fig-judge-ndcg-heatmap"]
    assert len([t for t in heat["data"] if t["type"] == "heatmap"]) == n_runs
    for fid in PER_RUN_FIGURES - {"fig-compare-distributions"}:
        assert fid in figs, fid


def test_forty_runs_draw_every_chart(forty):
    res, figs = forty
    assert len(res["runs"]) == 40
    heat = figs["fig-judge-ndcg-heatmap"]
    # one heatmap per run, in 14 rows of 3 that do not overlap
    assert len([t for t in heat["data"] if t["type"] == "heatmap"]) == 40
    domains = sorted(
        {tuple(heat["layout"][k]["domain"]) for k in heat["layout"] if k[:5] == "yaxis"}
    )
    assert len(domains) == 14
    assert all(a[1] < b[0] for a, b in itertools.pairwise(domains))
    colored = run_colors_by_figure(figs, res["runs"])
    assert set(colored) >= PER_RUN_FIGURES
    assert len(colored["fig-outcomes-bands"]) == 40


def test_a_run_keeps_one_colour_across_the_page(forty):
    res, figs = forty
    colored = run_colors_by_figure(figs, res["runs"])
    page: dict[str, set[str]] = {}
    for fid, per_run in colored.items():
        for run, cs in per_run.items():
            assert len(cs) == 1, (fid, run, cs)
            page.setdefault(run, set()).update(cs)
        # no two runs share a colour within a chart
        shown = [next(iter(cs)) for cs in per_run.values()]
        assert len(set(shown)) == len(shown), fid
    # the same run has the same colour in every chart
    assert {run: len(cs) for run, cs in page.items() if len(cs) > 1} == {}
    assert len({next(iter(cs)) for cs in page.values()}) == 40
