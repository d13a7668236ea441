"""Plotly helpers: one lean house style, figures as page fragments, safe labels.

Figures are rendered with ``include_plotlyjs=False`` (the page embeds plotly.js once in its head)
and a fixed ``div_id`` so the same logs give the same page. The house template is deliberately
small: plotly's default template is serialized into every figure and would dominate the size of
a report with many small charts.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
from markupsafe import Markup

from ddai.reports.blocks import Figure, Note

COLORS = ("#3366cc", "#dc6b1f", "#2a9d5c", "#c0392b", "#8e44ad", "#7f8c8d", "#b8860b", "#17a2b8")
OUTCOME_COLORS = {
    "success": "#2a9d5c",
    "failure": "#c0392b",
    "format_fail": "#8e44ad",
    "unjudged": "#7f8c8d",
}
_AXIS = {"gridcolor": "#e6e6e6", "zerolinecolor": "#cccccc", "automargin": True}
HOUSE = go.layout.Template(
    layout={
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        "colorway": list(COLORS),
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "margin": {"l": 56, "r": 16, "t": 40, "b": 48},
        "xaxis": _AXIS,
        "yaxis": _AXIS,
        "legend": {"orientation": "h", "y": -0.2},
        "hoverlabel": {"namelength": -1},
    }
)
_CONFIG = {"displaylogo": False, "responsive": True}


def label(text: object) -> str:
    """Text from the logs as a plotly label: plotly reads a few HTML tags in labels, so escape."""
    return html.escape(str(text), quote=False)


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def fraction_axis(values: list[float], title: str) -> dict[str, Any]:
    """A categorical axis of fractions in numeric order, labelled by ``fraction_label``.

    Success rates are fractions k/n of the group size: one bar per value that occurs reads
    better than numeric bars, whose widths follow the (uneven) spacing of the values.
    """
    order = [fraction_label(v) for v in sorted(set(values))]
    return {"title": title, "type": "category", "categoryorder": "array", "categoryarray": order}


def fraction_label(v: float) -> str:
    return f"{v:.3g}"


def to_block(fig: go.Figure, div_id: str, *, height: int = 360) -> Figure:
    """The figure as an HTML fragment in the house style, with a stable element id."""
    fig.update_layout(template=HOUSE, height=height)
    fragment = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)
    return Figure(Markup(fragment))


def _values(trace: Any) -> list[Any]:
    """The values a trace shows (a bar's lengths, a heatmap's cells, a Sankey's link sizes)."""
    kind = trace.type
    if kind == "bar":
        vals = trace.x if trace.orientation == "h" else trace.y
        return [v for v in (vals or ()) if v]  # a bar of 0 shows nothing
    if kind == "heatmap":
        return [v for row in (trace.z or ()) for v in (row or ()) if v is not None]
    if kind == "sankey":
        return [v for v in (trace.link.value or ()) if v]
    if kind == "histogram":
        return [v for v in (trace.x if trace.x is not None else trace.y or ()) if v is not None]
    vals = getattr(trace, "y", None)
    return [v for v in (vals if vals is not None else ()) if v is not None]


def has_data(fig: go.Figure) -> bool:
    """True when some trace of ``fig`` shows a value (a non-zero bar, a cell, a point).

    A figure without one draws empty axes (plotly spans them -1..4 around nothing), which reads
    as a broken chart; sections show a sentence instead (``chart_or_note``).
    """
    return any(_values(t) for t in fig.data)


def chart_or_note(fig: go.Figure, div_id: str, *, empty: str, height: int = 360) -> Figure | Note:
    """The figure as a block, or ``Note(empty)`` (why there is nothing to draw) without data."""
    return to_block(fig, div_id, height=height) if has_data(fig) else Note(empty)
