"""Downloadable prompt lists: a polars frame as a CSV link inlined in the offline page."""

from __future__ import annotations

from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.deps import pl
from ddai.reports.blocks import Download
from ddai.reports.formatting import csv_data_url


def csv_download(label: str, filename: str, df: pl.DataFrame) -> Download:
    """A link that saves ``df`` as ``filename`` (CSV, UTF-8), with no network and no server; text
    cells a spreadsheet would run as formulas are escaped (``csv_cells``)."""
    return Download(label, filename, csv_data_url(csv_cells.write_frame(df) or ""), df.height)


def csv_download_in_parts(
    label: str, filename: str, df: pl.DataFrame, column: str, parts: dict[str, tuple[str, str]]
) -> list[Download]:
    """``df`` as one download with its rows grouped by ``column`` (in ``parts``' order; rows of
    other values dropped), and one download per non-empty part that the page cuts out of it:
    ``parts`` maps a value to that download's (label, filename). Each part is one byte range of
    the whole list's CSV, so the page carries the rows once (the page script joins the header
    and the range when the link is clicked); with a single non-empty part the whole list is
    that part and no part link is made."""
    header = csv_cells.write_frame(df.head(0)) or ""
    bodies: list[tuple[str, int, str]] = []  # (value, rows, CSV rows without the header)
    for value in parts:
        part = df.filter(pl.col(column) == value)
        if part.height:
            text = csv_cells.write_frame(part) or ""
            assert text.startswith(header), (header, text[: len(header)])  # one writer, one header
            bodies.append((value, part.height, text[len(header) :]))
    whole = header + "".join(b for _, _, b in bodies)
    out = [Download(label, filename, csv_data_url(whole), sum(n for _, n, _ in bodies))]
    if len(bodies) < 2:
        return out
    start = 0
    for value, rows, body in bodies:
        end = start + len(body.encode("utf-8"))
        part_label, part_file = parts[value]
        out.append(Download(part_label, part_file, "", rows, slice_of=filename, span=(start, end)))
        start = end
    return out
