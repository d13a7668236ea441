"""README and report agree on the sections: the README's numbered list is the section registry, and
the page's headings are the same names in the same order."""

from __future__ import annotations

import re
from pathlib import Path

from report_world import planted_store

from ddai.reports import ReportConfig, build_report
from ddai.reports.sections import SECTIONS

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_sections() -> list[str]:
    """The bold names of the numbered list under the README's ``ddai report`` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index("### The HTML report")
    end = text.index("\n### ", start + 1)
    return re.findall(r"^\d+\. \*\*([^*]+)\*\*", text[start:end], re.MULTILINE)


def test_readme_lists_the_registry_in_order():
    listed = readme_sections()
    assert listed, "the README's report section has no numbered list of sections"
    assert [s.lower() for s in listed] == [label.lower() for label, _ in SECTIONS]


def test_the_page_numbers_the_readme_sections(tmp_path):
    logs = planted_store(tmp_path)
    out = tmp_path / "r.html"
    build_report(ReportConfig(logs=logs, out=out, progress=False, browse_max=0))
    headings = re.findall(r"<h2>(\d+)\. ([^<]+)</h2>", out.read_text(encoding="utf-8"))
    assert [(int(n), t.lower()) for n, t in headings] == [
        (i, s.lower()) for i, s in enumerate(readme_sections(), start=1)
    ]
