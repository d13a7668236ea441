"""Playwright driving the system Chromium (Debian's package; never a downloaded browser).

``browser()`` launches headless Chromium from ``chromium_exe()`` with the flags the DevTools
tests use (no background networking: this machine's network is closed) and yields a
``playwright.sync_api.Browser``; ``new_page(browser)`` opens a page that records script errors
and console errors into ``page.errors`` so a test can assert there were none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from chromium import CHROMIUM_FLAGS, chromium_exe

# Playwright picks its own debugging pipe; the DevTools port flag is the CDP tests' only.
LAUNCH_ARGS = [f for f in CHROMIUM_FLAGS if not f.startswith(("--remote-debugging", "--headless"))]


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless system Chromium under Playwright's sync API."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_exe(), headless=True, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


def new_page(b: Any, **kwargs: Any) -> Any:
    """A page whose uncaught script errors and console errors land in ``page.errors``."""
    page = b.new_page(**kwargs)
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(f"pageerror: {exc}"))
    page.on(
        "console",
        lambda msg: page.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
    )
    return page


def wait_for(page: Any, expression: str, arg: Any = None, timeout_s: float = 20.0) -> Any:
    """Poll ``page.evaluate(expression, arg)`` until it is truthy; returns that value.

    Playwright's ``wait_for_function`` polls inside the page by evaluating the predicate string
    there, which a page whose Content-Security-Policy forbids ``unsafe-eval`` (every explorer
    page without a chart) refuses whenever the first check is false. ``evaluate`` goes through
    the DevTools protocol, which the page's policy does not govern."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = page.evaluate(expression, arg)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for: {expression}")
        page.wait_for_timeout(50)
