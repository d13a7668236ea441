"""Number formatting shared by readings and table cells (pure)."""

from __future__ import annotations

import base64
import math
from typing import Any

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
