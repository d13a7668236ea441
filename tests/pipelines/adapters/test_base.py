"""The readers' shared quarantine of a line that holds no JSON object (``base.no_object``)."""

from __future__ import annotations

import pytest

from ddai.pipelines.adapters import flash, native, unified, verl
from ddai.pipelines.adapters.base import ReaderContext


@pytest.mark.parametrize("reader", [flash, native, unified, verl], ids=lambda m: m.__name__)
def test_every_jsonl_reader_quarantines_a_line_without_an_object_alike(reader, tmp_path):
    src = tmp_path / "log.jsonl"
    src.write_text('[1, 2]\n{"a": 1\n', encoding="utf-8")
    got = [(r.line, r.reason, r.detail) for r in reader.read(src, ReaderContext(run_id="r"))]
    assert got[:2] == [
        (1, "wrong type", "a line must be a JSON object"),
        (2, "malformed JSON", "Expecting ',' delimiter: line 2 column 1 (char 8)"),
    ]
