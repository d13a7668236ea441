"""The report's docs page and the report agree on the sections: the numbered list in
docs/report.md (the README's ``ddai report`` section before it moved there) is the section
registry, and the page's headings are the same names in the same order."""

from __future__ import annotations

import re
from pathlib import Path

from report_world import planted_store

from ddai.reports import ReportConfig, build_report
from ddai.reports.sections import SECTIONS

REPORT_DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"


def doc_sections() -> list[str]:
    """The bold names of the numbered list on the ``ddai report`` page (its first section)."""
    text = REPORT_DOC.read_text(encoding="utf-8")
    start = text.index("# The HTML report")
    end = text.find("\n## ", start + 1)
    return re.findall(
        r"^\d+\. \*\*([^*]+)\*\*", text[start : end if end > 0 else None], re.MULTILINE
    )


def test_report_doc_lists_the_registry_in_order():
    listed = doc_sections()
    assert listed, "docs/report.md has no numbered list of sections"
    assert [s.lower() for s in listed] == [label.lower() for label, _ in SECTIONS]


def test_the_page_numbers_the_doc_sections(tmp_path):
    logs = planted_store(tmp_path)
    out = tmp_path / "r.html"
    build_report(ReportConfig(logs=logs, out=out, progress=False, browse_max=0))
    headings = re.findall(r"<h2>(\d+)\. ([^<]+)</h2>", out.read_text(encoding="utf-8"))
    assert [(int(n), t.lower()) for n, t in headings] == [
        (i, s.lower()) for i, s in enumerate(doc_sections(), start=1)
    ]
