"""A check of the report's charts: every colour a figure shows is explained by a legend entry or
a colour bar (docs/report.md's promise), used by the chart tests over every built figure."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go


def _trace_color(trace: Any) -> Any:
    marker = getattr(trace, "marker", None)
    c = getattr(marker, "color", None) if marker is not None else None
    if c is None and getattr(trace, "line", None) is not None:
        c = trace.line.color
    return c


def legend_gaps(fig: go.Figure) -> list[str]:
    """Colours ``fig`` shows that no legend entry or colour bar explains (empty when all are).

    A bar, line or histogram needs a named legend entry (its own, or one of its legend group); a
    heatmap needs its colour bar; a Sankey's nodes share one colour (their labels name them).
    """
    gaps: list[str] = []
    layout = fig.layout
    legend_on = layout.showlegend is not False
    shown_groups = {
        t.legendgroup
        for t in fig.data
        if getattr(t, "showlegend", None) is not False
        and t.name
        and getattr(t, "legendgroup", None)
    }
    for i, t in enumerate(fig.data):
        what = f"trace {i} ({t.type}{': ' + t.name if t.name else ''})"
        if t.type == "heatmap":
            axis = getattr(layout, t.coloraxis) if t.coloraxis else None
            if (axis.showscale if axis is not None else t.showscale) is False:
                gaps.append(f"{what} has no colour bar")
        elif t.type == "sankey":
            colors = t.node.color
            if isinstance(colors, (list, tuple)) and len(set(colors)) > 1:
                gaps.append(f"{what} colours its nodes without a legend")
        elif t.type in ("bar", "scatter", "histogram"):
            if _trace_color(t) is not None and not isinstance(_trace_color(t), str):
                gaps.append(f"{what} varies its colour per point")
            named = legend_on and bool(t.name)
            if not named or (t.showlegend is False and t.legendgroup not in shown_groups):
                gaps.append(f"{what} has no legend entry")
    return gaps
