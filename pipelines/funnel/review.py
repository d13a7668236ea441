"""The GT review sheet: what the verifier proposed for each candidate, for a person to decide.

``review.csv`` starts with the decision columns of a decisions file (``uid, verdict, reason``), so
a reviewer fills in ``verdict`` (``ok``, ``wrong`` or ``uncertain``) and hands the sheet back with
``--decisions review.csv``. Cells a spreadsheet would run as formulas are escaped
(``ddai.pipelines.records.csv_cells``) and unescaped when read back. ``review.html`` shows the same rows
with the reference page text.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields

from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.lazy import lazy_module

jinja2 = lazy_module("jinja2")

PAGE_TEXT_CHARS = 2000


@dataclass(frozen=True)
class ReviewRow:
    uid: str
    verdict: str  # the decision in force: a person's, or the verifier's under --trust-verifier
    reason: str
    decided_by: str  # "person", "verifier" or "" (undecided)
    proposed_verdict: str  # the verifier's proposal ("" when it was not asked, "error" on failure)
    proposed_reason: str
    rules: str  # the candidate rules the prompt matched, "; "-joined
    score: float | None  # mean reward in the run
    ndcg: float | None  # mean NDCG in the run
    question: str
    reference: str
    pages: str  # reference page ids, "; "-joined
    page_text: str = ""  # shown in the HTML only


CSV_COLUMNS = [f.name for f in fields(ReviewRow) if f.name != "page_text"]


def sheet_csv(rows: list[ReviewRow]) -> str:
    """The sheet's CSV text; answers and reasons are untrusted text, escaped (``csv_cells``)."""

    def cells(r: ReviewRow) -> list:
        rec = asdict(r)
        for k in ("score", "ndcg"):
            rec[k] = "" if rec[k] is None else f"{rec[k]:.6g}"
        return [rec[c] for c in CSV_COLUMNS]

    return csv_cells.rows_text(CSV_COLUMNS, map(cells, rows))


# The sheet's page; compiled on first use (importing this module loads no jinja2).
_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:.4rem;vertical-align:top}
th{background:#f4f4f4;text-align:left}.wrong{background:#fde2e2}.uncertain{background:#fff4d6}
.ok{background:#e4f6e4}pre{white-space:pre-wrap;max-height:14rem;overflow:auto;margin:0;font-size:.85em}
.muted{color:#777}
</style></head><body>
<h1>{{ title }}</h1>
<p>{{ counts }}. Fill in <code>verdict</code> (ok, wrong or uncertain) in <code>review.csv</code>
and pass it back with <code>--decisions review.csv</code>; only <code>wrong</code> and
<code>uncertain</code> exclude a prompt.</p>
<table><thead><tr><th>uid</th><th>question</th><th>reference answer</th><th>proposal</th>
<th>decision</th><th>rules</th><th>score / NDCG</th><th>reference page text</th></tr></thead><tbody>
{% for r in rows %}<tr class="{{ r.verdict }}">
<td>{{ r.uid }}</td><td>{{ r.question }}</td><td><b>{{ r.reference }}</b></td>
<td>{% if r.proposed_verdict %}<b>{{ r.proposed_verdict }}</b>: {{ r.proposed_reason }}
{% else %}<span class="muted">not asked</span>{% endif %}</td>
<td>{% if r.verdict %}<b>{{ r.verdict }}</b> ({{ r.decided_by }}){% if r.reason %}: {{ r.reason }}{% endif %}
{% else %}<span class="muted">undecided</span>{% endif %}</td>
<td>{{ r.rules }}</td>
<td>{{ "%.3f"|format(r.score) if r.score is not none else "" }} /
{{ "%.3f"|format(r.ndcg) if r.ndcg is not none else "" }}</td>
<td><span class="muted">{{ r.pages }}</span><pre>{{ r.page_text[:limit] }}</pre></td>
</tr>{% endfor %}
</tbody></table></body></html>
"""


@functools.cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(_HTML)


def to_html(rows: list[ReviewRow], *, title: str, counts: str) -> str:
    return _template().render(rows=rows, title=title, counts=counts, limit=PAGE_TEXT_CHARS)
