"""The reworked charts (issue 18): what each figure of the page draws, read back from its JSON.

Planted world (see ``report_world``): run ``base`` has 4 judged prompts at step 1, run ``new`` 3
judged prompts (u5 is unjudged) over steps 1 and 2; judge scores take the levels 0, 0.5 and 1.
"""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
from report_world import page_figures, planted_rows, planted_store
from support.legend_check import legend_gaps

from ddai.pipelines import store
from ddai.reports import ReportConfig, build_report, figures


def _page(logs, tmp_path, **kw):
    out = tmp_path / "r.html"
    res = build_report(ReportConfig(logs=logs, out=out, progress=False, browse_max=0, **kw))
    return res, page_figures(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    logs = planted_store(tmp_path_factory.mktemp("planted"))
    return _page(logs, tmp_path_factory.mktemp("out"), compare=("base", "new"))


@pytest.fixture(scope="module")
def base_only(tmp_path_factory):
    logs = tmp_path_factory.mktemp("base") / "logs"
    store.write_run(logs, "base", planted_rows()["base"])
    return _page(logs, tmp_path_factory.mktemp("out"))


def test_bar_slots_follow_the_smallest_gap():
    # gaps 0.25, 0.25, 0.5 → slot 0.25 · 0.8 = 0.2, two traces of 0.1 each from -0.1
    width, offsets = figures.bar_slots([0.0, 0.25, 0.5, 1.0, 0.5], 2)
    assert width == pytest.approx(0.1) and offsets == pytest.approx([-0.1, 0.0])
    # only 0 and 1: the gap of 1 is capped at 0.25 (· 0.8), not the whole axis
    width, offsets = figures.bar_slots([0.0, 1.0], 1)
    assert width == pytest.approx(0.2) and offsets == pytest.approx([-0.1])
    # a single value: a slot of 0.1 · 0.8
    assert figures.bar_slots([0.5], 1)[0] == pytest.approx(0.08)


def test_success_histogram_shows_shares_on_a_numeric_axis_when_runs_differ(planted):
    res, figs = planted
    fig = figs["fig-outcomes-success-hist"]
    assert res["stats"]["outcomes"]["success_hist_shares"] is True
    assert fig["layout"]["xaxis"]["type"] == "linear"
    assert fig["layout"]["yaxis"]["tickformat"] == ".0%"
    bars = {t["name"]: t for t in fig["data"]}
    assert set(bars) == {"base (4 prompts)", "new (3 prompts)"}
    # base: rates 0, 0.5, 0.5, 1 of 4 prompts; new: 0, 0.5, 1 of 3
    assert bars["base (4 prompts)"]["x"] == [0.0, 0.5, 1.0]
    assert bars["base (4 prompts)"]["y"] == pytest.approx([0.25, 0.5, 0.25])
    assert bars["new (3 prompts)"]["y"] == pytest.approx([1 / 3] * 3)
    # side by side at each rate: gaps of 0.5, capped at 0.25, · 0.8 = 0.2 split in two
    assert [bars[n]["offset"] for n in sorted(bars)] == pytest.approx([-0.1, 0.0])
    assert all(b["width"] == pytest.approx(0.1) for b in bars.values())


def test_one_run_keeps_counts(base_only):
    res, figs = base_only
    fig = figs["fig-outcomes-success-hist"]
    assert res["stats"]["outcomes"]["success_hist_shares"] is False
    assert fig["layout"]["yaxis"]["title"]["text"] == "prompts"
    assert fig["data"][0]["y"] == [1, 2, 1]


def test_heatmap_uses_the_judge_levels_and_a_colour_bar(planted):
    res, figs = planted
    fig = figs["fig-judge-ndcg-heatmap"]
    grid = res["stats"]["judge-ndcg"]["grid"]
    assert grid["judge_levels"] == ["0", "0.5", "1"] and grid["judge_binned"] is False
    base = fig["data"][0]
    assert base["y"] == ["0", "0.5", "1"] and base["x"][0] == "0" and base["x"][-1] == "1"
    # base's 16 rollouts: judge 1 with NDCG 0 → 3, judge 1 with NDCG 1 → 5, judge 0.5 with NDCG
    # 0.613 → (0.6, 0.8], judge 0 with NDCG 0 → 5, with 0.387 → (0.2, 0.4], with 1 → 1
    text = {
        (y, x): base["text"][i][j] for i, y in enumerate(base["y"]) for j, x in enumerate(base["x"])
    }
    assert text["1", "0"] == "3" and text["1", "1"] == "5" and text["0.5", "(0.6, 0.8]"] == "1"
    assert text["0", "0"] == "5" and text["0", "(0.2, 0.4]"] == "1" and text["0", "1"] == "1"
    assert base["z"][2][0] == pytest.approx(3 / 16) and base["z"][1][0] is None
    axis = fig["layout"]["coloraxis"]
    assert axis.get("showscale", True) is not False and axis["colorbar"]["tickformat"] == ".0%"


def test_a_continuous_judge_is_binned(tmp_path):
    rows = [
        {"uid": f"u{i}", "rollout_idx": 0, "judge_score": i / 19, "ndcg": 0.5} for i in range(20)
    ]
    logs = tmp_path / "logs"
    store.write_run(logs, "r", rows)
    res, figs = _page(logs, tmp_path)
    grid = res["stats"]["judge-ndcg"]["grid"]
    assert grid["judge_binned"] is True
    assert grid["judge_levels"][0] == "[0, 0.1)" and grid["judge_levels"][-1] == "[0.9, 1]"
    # 20 scores i/19 in 10 bins: 2 per bin; NDCG 0.5 in (0.4, 0.6]
    trace = figs["fig-judge-ndcg-heatmap"]["data"][0]
    assert [row[3] for row in trace["text"]] == ["2"] * 10


def test_zero_variance_one_step_is_a_bar_per_run(base_only):
    _, figs = base_only
    (bar,) = figs["fig-outcomes-zero-variance"]["data"]
    # u3 (all 0) and u4 (all 1) of the 4 groups at step 1
    assert bar["type"] == "bar" and bar["x"] == [0.5] and bar["text"] == ["2 of 4"]


def test_zero_variance_many_steps_is_a_heat_strip(planted):
    _, figs = planted
    (strip,) = figs["fig-outcomes-zero-variance"]["data"]
    assert strip["type"] == "heatmap" and strip["y"] == ["base", "new"] and strip["x"] == [1, 2]
    # base: 2 of 4 at step 1, nothing at step 2; new: u1 and u2 flat at step 1, u3 varied at 2
    assert strip["z"] == [[0.5, None], [1.0, 0.0]]
    assert strip["colorbar"]["tickformat"] == ".0%" and (strip["zmin"], strip["zmax"]) == (0, 1)


def test_every_colour_has_a_legend_entry(planted, base_only):
    for _, figs in (planted, base_only):
        for fid, fig in figs.items():
            assert legend_gaps(go.Figure(fig)) == [], fid
            if any(t["type"] in ("bar", "scatter", "histogram") for t in fig["data"]):
                # plotly would hide a one-trace legend; the house style keeps it
                assert go.Figure(fig).layout.template.layout.showlegend is True, fid


def test_unknown_terminations_get_their_legend_entry(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "r", [{"uid": "u", "rollout_idx": i} for i in range(3)])
    _, figs = _page(logs, tmp_path)
    names = [t["name"] for t in figs["fig-overview-termination"]["data"]]
    assert names == ["unknown"]


def test_legend_gaps_finds_unexplained_colours():
    assert legend_gaps(go.Figure(go.Bar(y=[1]))) == ["trace 0 (bar) has no legend entry"]
    grouped = go.Figure(
        [
            go.Bar(name="a", y=[1], legendgroup="a"),
            go.Bar(name="a", y=[2], legendgroup="a", showlegend=False),
            go.Bar(name="b", y=[2], legendgroup="b", showlegend=False),
        ]
    )
    assert legend_gaps(grouped) == ["trace 2 (bar: b) has no legend entry"]
    assert legend_gaps(go.Figure(go.Heatmap(z=[[1]], showscale=False))) == [
        "trace 0 (heatmap) has no colour bar"
    ]
    sankey = go.Sankey(node={"label": ["a", "b"], "color": ["red", "blue"]}, link={})
    assert legend_gaps(go.Figure(sankey)) == ["trace 0 (sankey) colours its nodes without a legend"]
    hidden = go.Figure(go.Bar(name="a", y=[1]), layout={"showlegend": False})
    assert legend_gaps(hidden) == ["trace 0 (bar: a) has no legend entry"]
