"""The report page's packed data read back: the inverse of ``ddai.reports.render.packed`` (gzip +
base64), which the page's own script undoes in the browser, and its CSV downloads as saved."""

from __future__ import annotations

import base64
import gzip
import re


def unpacked(data: str) -> str:
    """The inverse of ``ddai.reports.render.packed``: the text it compressed."""
    return gzip.decompress(base64.b64decode(data)).decode("utf-8")


_LINK = re.compile(r"<a download=\"([^\"]+)\" href=\"([^\"]*)\"([^>]*)>")
_SPAN = re.compile(r'data-slice-of="([^"]+)" data-span="(\d+)-(\d+)"')


def downloads(html: str) -> dict[str, str]:
    """Every CSV download of a report page as the text a reader saves, by file name: a data URL
    decoded, and a part (``data-slice-of``) cut from its whole list as the page script cuts it
    (the whole list's header line, then the part's byte range of the rows after it)."""
    whole: dict[str, bytes] = {}
    parts: dict[str, tuple[str, int, int]] = {}
    for name, href, rest in _LINK.findall(html):
        if m := _SPAN.search(rest):
            parts[name] = (m.group(1), int(m.group(2)), int(m.group(3)))
        else:
            assert href.startswith("data:text/csv;charset=utf-8;base64,"), href[:60]
            whole[name] = base64.b64decode(href.split(",", 1)[1])
    out = {name: data.decode("utf-8") for name, data in whole.items()}
    for name, (of, start, end) in parts.items():
        data = whole[of]
        head = data.index(b"\n") + 1
        out[name] = (data[:head] + data[head + start : head + end]).decode("utf-8")
    return out
