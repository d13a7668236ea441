"""The report page's packed data read back: the inverse of ``ddai.reports.render.packed`` (gzip +
base64), which the page's own script undoes in the browser."""

from __future__ import annotations

import base64
import gzip


def unpacked(data: str) -> str:
    """The inverse of ``ddai.reports.render.packed``: the text it compressed."""
    return gzip.decompress(base64.b64decode(data)).decode("utf-8")
