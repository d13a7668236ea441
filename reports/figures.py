"""Plotly helpers: one lean house style, figures as page data, safe labels, a legend per colour.

A figure is a ``div`` with a fixed id plus its plotly JSON in a ``<script type="application/json">``
(no code): the page embeds plotly.js once, compressed, and draws every figure after unpacking it
(``templates/report.js``), so the same logs give the same page. The house template is deliberately
small: plotly's default template is serialized into every figure and would dominate the size of
a report with many small charts.
"""

from __future__ import annotations

import html
import itertools
import json
from typing import Any

from markupsafe import Markup
from plotly.utils import PlotlyJSONEncoder

from ddai.pipelines.records.deps import go
from ddai.reports.blocks import Figure, Note
from ddai.reports.palette import COLORS

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
        # beside the plot, top-aligned: a legend below it met the x-axis title once it wrapped
        "legend": {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"},
        # plotly hides the legend of a one-trace figure; every colour here names what it is
        "showlegend": True,
        "hoverlabel": {"namelength": -1},
    }
)


def label(text: object) -> str:
    """Text from the logs as a plotly label: plotly reads a few HTML tags in labels, so escape."""
    return html.escape(str(text), quote=False)


def color(i: int) -> str:
    """The ``i``-th house colour (classes and outcomes; runs take ``ReportContext.color``)."""
    return COLORS[i % len(COLORS)]


def fraction_axis(title: str) -> dict[str, Any]:
    """A numeric axis for fractions in [0, 1] (success rates), ticks every 0.1.

    Success rates are fractions k/n of the group size; on a numeric axis 1/16 and 1/8 sit where
    they are, so runs with different group sizes line up (a categorical axis would space 0.0625
    like 0.5).
    """
    return {"title": title, "type": "linear", "range": [-0.04, 1.04], "dtick": 0.1}


def bar_slots(
    values: list[float], n_traces: int, *, fill: float = 0.8
) -> tuple[float, list[float]]:
    """Bar width and per-trace offsets for ``n_traces`` bar traces side by side on a numeric axis.

    The slot is the smallest gap between distinct ``values`` (0.1 with fewer than two), at most
    0.25; plotly's own grouping would widen a run whose rates are only 0 and 1 to span the axis.
    """
    xs = sorted(set(values))
    gaps = [b - a for a, b in itertools.pairwise(xs) if b - a > 1e-9]
    slot = min(min(gaps) if gaps else 0.1, 0.25) * fill
    width = slot / max(n_traces, 1)
    return width, [-slot / 2 + i * width for i in range(n_traces)]


def figure_json(fig: go.Figure) -> str:
    """The figure as compact JSON that is safe inside ``<script>`` (no ``<`` can end it early)."""
    text = json.dumps(fig.to_plotly_json(), cls=PlotlyJSONEncoder, separators=(",", ":"))
    return text.replace("<", "\\u003c")  # only inside JSON strings, where the escape is valid


def to_block(fig: go.Figure, div_id: str, *, height: int = 360) -> Figure:
    """The figure as an HTML fragment in the house style, with a stable element id.

    The fragment is an empty ``div.plotly-graph-div`` and the figure's JSON; the page's script
    draws it once plotly.js is unpacked.
    """
    fig.update_layout(template=HOUSE, height=height)
    ident = html.escape(div_id)
    fragment = (
        f'<div id="{ident}" class="plotly-graph-div" style="height:{int(height)}px;width:100%">'
        f'</div><script type="application/json" class="figure-data" data-for="{ident}">'
        f"{figure_json(fig)}</script>"
    )
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
