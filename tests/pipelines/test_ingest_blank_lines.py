"""Blank lines of a JSONL source are skipped, and counted: a file of N lines with k blank ones
reads N - k rows, and the source's notes say ``blank lines skipped: k`` (else read + quarantined
would not add up to the file's lines, with nothing saying why)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES, SHARED
from support.verl_dump import write_verl_dump

from ddai.pipelines.ingest import BLANK_NOTE, IngestConfig, ingest


def _verl(tmp: Path) -> Path:
    ds = pl.read_parquet(FIXTURES / "dataset.parquet")
    prompts = dict(zip(ds["id"].to_list(), ds["prompt"].to_list(), strict=True))
    rows = [json.loads(x) for x in (FIXTURES / "logs" / "curriculum.jsonl").open()]
    return write_verl_dump(rows, prompts, tmp / "dump" / "exp1")[0]


SOURCES = {
    "ddai": lambda tmp: FIXTURES / "logs" / "phase1.jsonl",
    "ddai-unified": lambda tmp: FIXTURES / "unified" / "phase1" / "unified_trajectory.jsonl",
    "ddai-flash": lambda tmp: SHARED / "ddai-formats" / "examples" / "flash_rm_detail.jsonl",
    "verl": _verl,
}


def _with_blanks(src: Path, out: Path) -> Path:
    """``src`` with an empty line and a line of spaces (and CR) put between its lines."""
    lines = src.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 3
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"".join([lines[0], b"\n", *lines[1:-1], b"  \r\n", lines[-1]]))
    return out


@pytest.mark.parametrize("columnar", [True, False], ids=["columns", "rows"])
@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_blank_lines_are_counted_in_the_notes(tmp_path, fmt, columnar):
    src = SOURCES[fmt](tmp_path)
    blanked = _with_blanks(src, tmp_path / "blank" / src.parent.name / src.name)
    plain = ingest(IngestConfig([src], tmp_path / "a", fmt=fmt, progress=False, columnar=columnar))
    got = ingest(
        IngestConfig([blanked], tmp_path / "b", fmt=fmt, progress=False, columnar=columnar)
    )
    assert got.rows_in == plain.rows_in > 0
    assert BLANK_NOTE not in plain.notes.get(str(src), {})
    assert got.notes[str(blanked)][BLANK_NOTE] == 2
    assert got.summary()["notes"][str(blanked)][BLANK_NOTE] == 2
