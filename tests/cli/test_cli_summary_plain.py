"""A summary printed where rich would write plain text (no terminal) is written without rich, byte
for byte what rich writes; text rich would change (tabs, control characters, emoji codes, a
title wider than the console) still goes through rich."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ddai.cli import common, plain_text

CASES = [
    {"hard A": 11446, "round 1": 38440, "hard max": 0.2, "skipped (unchanged)": False},
    {"outputs": {"focus": "/tmp/some where/r1.parquet", "b": "s3://bucket/x.parquet"}, "n": 0},
    {"déjà vu": "naïve 日本語 ✓", "none": {}, "empty": [], "one": ["x"], "bytes": 3 << 20},
    {"rows": [{"a": 1, "b": 2.5}, {"a": None, "b": "z"}], "nested": {"deeper": {"x": 1.23456}}},
    {"tab": "a\tb", "cr": "a\rb", "emoji": ":thumbs_up: done", "url": "http://h:80/x"},
]


@pytest.mark.parametrize("data", CASES)
def test_plain_summary_is_what_rich_writes(data, capsys, monkeypatch):
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert common.console.plain()  # pytest's captured stdout is no terminal
    common.summary("ddai curate focus", data)
    ours = capsys.readouterr().out
    monkeypatch.setattr(plain_text, "fits", lambda title, lines: False)
    common.summary("ddai curate focus", data)
    assert ours == capsys.readouterr().out
    assert ours.startswith("ddai curate focus\n")


def test_rich_is_kept_where_it_changes_the_text():
    assert plain_text.fits("t", ["  a  1", "  b  /x/y:z"])
    assert not plain_text.fits("t", ["  a  x\ty"])
    assert not plain_text.fits("t", ["  a  x\ry"])
    assert not plain_text.fits("t", ["  a  :smile:"])
    assert not plain_text.fits("x" * 500, ["  a  1"])


def test_a_forced_terminal_is_no_plain_console(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not plain_text.no_terminal(sys.stdout)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert plain_text.no_terminal(sys.stdout)


def test_a_plain_summary_loads_no_rich():
    code = (
        "import sys\n"
        "from ddai.cli.common import summary, err_console\n"
        "with err_console.status('x'):\n"
        "    summary('ddai curate focus', {'a': 1, 'outputs': {'focus': '/tmp/x'}})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'), file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout == "ddai curate focus\n  a        1\n  outputs\n    focus  /tmp/x\n"
    assert p.stderr.strip() == "[]"
