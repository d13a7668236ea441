"""HTML analysis reports over the rollout logs (``ddai report``): plotly figures, jinja2 pages.

The names below load their module on first use (PEP 562): importing ``ddai.reports.config`` (what
``ddai report --help`` reads) loads no plotly, DuckDB or polars.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_report": "ddai.reports.build",
    "ReportConfig": "ddai.reports.config",
    "demo_report": "ddai.reports.demo",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
