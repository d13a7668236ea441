"""The report's building blocks: a section is a title, a plain-language reading and blocks.

Section builders return data, never HTML: the templates render every block with autoescaping, so
text from the logs (questions, thinks, answers, run ids) can never become markup. The one
exception is ``Figure.html``, plotly's own output, whose JSON payload plotly escapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from ddai.reports.context import ReportContext


@dataclass(frozen=True)
class Figure:
    """A plotly figure as an HTML fragment (no plotly.js: the page embeds it once)."""

    html: Markup
    kind: str = "figure"


@dataclass(frozen=True)
class Table:
    """A small table; cells are formatted by the template's ``cell`` filter and escaped."""

    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""
    kind: str = "table"


@dataclass(frozen=True)
class Note:
    """A line of text (e.g. why a section is empty and which flag fills it)."""

    text: str
    kind: str = "note"


@dataclass(frozen=True)
class Partial:
    """A block rendered by its own template (``templates/<template>``) with ``context``."""

    template: str
    context: dict[str, Any]
    kind: str = "partial"


@dataclass(frozen=True)
class Download:
    """A file the reader saves from the offline page: its bytes inlined as a data URL."""

    label: str
    filename: str
    href: str  # data:text/csv;charset=utf-8;base64,… ("" for a part cut from another download)
    rows: int
    slice_of: str | None = None  # the download (filename) whose rows after its header hold these
    span: tuple[int, int] = (0, 0)  # their byte range there, counted after the header line
    kind: str = "download"


Block = Figure | Table | Note | Partial | Download


@dataclass
class Section:
    """One numbered section of the report.

    ``stats`` holds the section's numbers under plain keys; the page embeds every section's stats
    as JSON (``#report-stats``) so scripts and tests read the same numbers the reader sees.
    """

    id: str
    title: str
    reading: str
    blocks: list[Block] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


SectionBuilder = Callable[["ReportContext"], Section]
