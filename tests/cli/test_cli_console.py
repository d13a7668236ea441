"""The summary consoles' spinner (``ddai.cli.common.err_console.status``): rich's live spinner on
a terminal; nothing, and nothing loaded, where rich's transient spinner would draw nothing."""

from __future__ import annotations

import subprocess
import sys

CODE = (
    "import sys\n"
    "from ddai.cli.common import err_console\n"
    "with err_console.status('working') as s:\n"
    # sys.__stdout__: a live display on a terminal redirects sys.stdout into itself
    "    sys.__stdout__.write(f\"{type(s).__module__} {'rich.live' in sys.modules}\\n\")\n"
)


def _run(env_extra: dict[str, str]) -> tuple[str, str]:
    import os

    env = {
        k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR", "TERM")
    }
    p = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, env=env | env_extra
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip(), p.stderr


def test_no_spinner_is_loaded_where_stderr_is_no_terminal():
    out, err = _run({})
    assert out == "builtins False", out  # no spinner object; rich's live display never loaded
    assert err == ""


def test_a_terminal_gets_richs_spinner():
    out, err = _run({"TTY_COMPATIBLE": "1", "TERM": "xterm"})
    assert out == "rich.status True", out
    assert "working" in err  # drawn on stderr
