"""The clean-batch scan: the same verdict as a line-by-line reading of the rules it states."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ddai.pipelines.adapters import line_batches
from ddai.pipelines.adapters.line_batches import MAX_OPENERS, _is_clean, _newlines


def _reference(data: bytes) -> bool:
    """The rules of a clean batch, line by line, as plainly as they read."""
    if not data.endswith(b"\n"):
        return False
    for line in data[:-1].split(b"\n"):
        if not line or any(b < 32 for b in line):  # blank, or a control byte
            return False
        if re.search(rb"\\u[dD][89a-fA-F]", line):
            return False
        if line.count(b"[") + line.count(b"{") >= MAX_OPENERS:
            return False
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


GOOD = json.dumps({"a": [1, {"b": "x"}], "t": "한국어 中文"}, ensure_ascii=False).encode() + b"\n"
CASES = {
    "clean": GOOD * 5,
    "blank line": GOOD + b"\n" + GOOD,
    "leading newline": b"\n" + GOOD,
    "unterminated": GOOD + GOOD[:-1],
    "raw tab": GOOD + b'{"a": "x\ty"}\n',
    "raw CR": GOOD + b'{"a": "x\ry"}\n',
    "surrogate escape": GOOD + b'{"a": "\\ud83d\\ude00"}\n',
    "other escape": GOOD + b'{"a": "\\u00e9 \\uE000"}\n',
    "invalid UTF-8": GOOD + b'{"a": "\xff"}\n',
    "encoded surrogate": GOOD + b'{"a": "\xed\xa0\x80"}\n',
    "truncated sequence": GOOD + b'{"a": "\xea\xb0"}\n',
    "deep nesting": GOOD + b"[" * MAX_OPENERS + b"]" * MAX_OPENERS + b"\n",
    "just under": GOOD + b"{" * (MAX_OPENERS - 1) + b"\n",
    "openers spread over lines": (b"[" * (MAX_OPENERS // 2) + b"\n") * 4,
    "mixed openers on one line": GOOD + b"[{" * (MAX_OPENERS // 2) + b"\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_clean_scan_matches_the_rules(name):
    data = CASES[name]
    ends = _newlines(np.frombuffer(data, np.uint8))
    assert _is_clean(data, ends) == _reference(data)
    assert _reference(data) == (
        name in {"clean", "other escape", "just under", "openers spread over lines"}
    )


def test_batches_carry_their_newline_offsets(tmp_path, monkeypatch):
    from ddai.pipelines.adapters.base import ReaderContext

    src = tmp_path / "x.jsonl"
    src.write_bytes(GOOD * 40)
    with open(src, "rb") as fh:
        batches = list(line_batches.iter_batches(fh, ReaderContext(), 300))
    assert len(batches) > 3 and all(b.clean for b in batches)
    for b in batches:
        assert b.ends.tolist() == [m.start() for m in re.finditer(b"\n", b.data)]
    assert [b.first_line for b in batches][1] == 1 + batches[0].data.count(b"\n")
