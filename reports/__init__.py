"""HTML analysis reports over the rollout logs (``ddai report``): plotly figures, jinja2 pages."""

from ddai.reports.build import build_report
from ddai.reports.config import ReportConfig
from ddai.reports.demo import demo_report

__all__ = ["ReportConfig", "build_report", "demo_report"]
