"""Number formatting shared by readings and table cells (pure), and the jinja2 environment the
report and the explorer render their templates through."""

from __future__ import annotations

import base64
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

MISSING = "—"


def num(v: Any, digits: int = 3) -> str:
    """Integers with thousands separators, floats with ``digits`` decimals, None as a dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def pct(v: float | None, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage (``0.1234`` → ``12.3%``)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    return f"{100 * v:.{digits}f}%"


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def csv_data_url(csv_text: str) -> str:
    """CSV text as a ``data:`` URL (a download link that works in the offline page)."""
    return "data:text/csv;charset=utf-8;base64," + base64.b64encode(csv_text.encode()).decode()


def template_env(package: str, **filters: Any) -> jinja2.Environment:
    """A jinja2 environment over ``package``'s ``templates`` folder, with ``filters``: autoescaping
    on, and an undefined name an error rather than an empty string."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(filters)
    return env
