"""The page: sections rendered through jinja2 (autoescaping on) around plotly.js, CSS and JS inlined
once, so the file opens offline and loads nothing from the network.

plotly.js (4.8 MB) and the trajectory browser's rows are shipped gzip-compressed as base64
(``packed``): the page script unpacks them with the browser's ``DecompressionStream``. That keeps a
page with thousands of browsable rollouts a few MB.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from markupsafe import Markup
from plotly.offline import get_plotlyjs

from ddai.reports.blocks import Section
from ddai.reports.formatting import num, template_env

if TYPE_CHECKING:
    import jinja2


def _cell(v: Any) -> str:
    return num(v)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return template_env("ddai.reports", cell=_cell)


def _asset(name: str) -> str:
    return resources.files("ddai.reports").joinpath("templates", name).read_text(encoding="utf-8")


def _inline_script(code: str) -> Markup:
    """Code for an inline ``<script>``: it must not close the element early."""
    if "</script" in code.lower():
        raise ValueError("inline script holds '</script'; it would end the element early")
    return Markup(code)


def packed(text: str) -> str:
    """``text`` gzip-compressed (no timestamp, so the page is reproducible) as base64."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), 9, mtime=0)).decode("ascii")


def packed_json(value: Any) -> str:
    return packed(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js, packed: 1.5 MB of base64 instead of 4.8 MB of code."""
    return packed(get_plotlyjs())


def warm_plotly_js() -> threading.Thread:
    """Pack plotly.js on a background thread (zlib releases the GIL, as DuckDB does while it
    runs the report's queries); join the thread before ``render_page`` so it finds it packed."""
    thread = threading.Thread(target=plotly_js, name="pack-plotly-js", daemon=True)
    thread.start()
    return thread


def render_page(
    *,
    title: str,
    sections: list[Section],
    runs: list[str],
    logs: str,
    created: str,
    version: str,
) -> str:
    """The whole HTML document; ``#report-stats`` holds every section's numbers as JSON."""
    return (
        environment()
        .get_template("report.html")
        .render(
            title=title,
            sections=sections,
            runs=runs,
            logs=logs,
            created=created,
            version=version,
            css=Markup(_asset("report.css")),
            js=_inline_script(_asset("report.js")),
            plotlyjs=plotly_js(),
            stats={s.id: s.stats for s in sections},
        )
    )
