"""``figures.has_data``: a figure with nothing to show is replaced by a sentence."""

from __future__ import annotations

import plotly.graph_objects as go

from ddai.reports import figures
from ddai.reports.blocks import Figure, Note


def test_bars_of_zero_heatmaps_of_nothing_and_empty_histograms_have_no_data():
    assert not figures.has_data(go.Figure())
    assert not figures.has_data(go.Figure(go.Bar(x=["a", "b"], y=[0, 0])))
    assert not figures.has_data(go.Figure(go.Bar(y=["r"], x=[0.0], orientation="h")))
    assert not figures.has_data(go.Figure(go.Heatmap(z=[[None, None], [None, None]])))
    assert not figures.has_data(go.Figure(go.Histogram(x=[])))


def test_any_shown_value_is_data():
    assert figures.has_data(go.Figure(go.Bar(x=["a", "b"], y=[0, 3])))
    assert figures.has_data(go.Figure(go.Bar(y=["r"], x=[0.25], orientation="h")))
    assert figures.has_data(go.Figure(go.Heatmap(z=[[None, 4]])))
    assert figures.has_data(go.Figure(go.Histogram(x=[0.0])))
    assert figures.has_data(go.Figure(go.Scatter(x=[1], y=[0.0])))  # a point at 0 is a point


def test_chart_or_note():
    empty = figures.chart_or_note(go.Figure(go.Bar(y=[0])), "f", empty="nothing here")
    assert empty == Note("nothing here")
    assert isinstance(figures.chart_or_note(go.Figure(go.Bar(y=[1])), "f", empty="x"), Figure)
