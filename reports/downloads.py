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
