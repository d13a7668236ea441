"""Headless Chromium over the DevTools protocol, for the browser tests (report and explorer).

``chromium()`` starts the browser and yields its DevTools port; ``open_page(port)`` connects to
its page target and yields a ``Page`` that records every request, dialog and script error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def chromium_exe() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail(
            "chromium is not installed; run `make browser` (Debian: apt-get install chromium)"
        )
    return exe


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[int]:
    """A headless Chromium with its own profile folder; yields the DevTools port."""
    proc = subprocess.Popen(
        [chromium_exe(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        assert proc.stderr is not None
        for line in proc.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "chromium did not start its DevTools endpoint"
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


class Page:
    """A minimal DevTools client for one page: commands, and the events it records."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.requests: list[str] = []
        self.responses: dict[str, int] = {}
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.loaded = asyncio.Event()
        self.background: set[asyncio.Task[Any]] = set()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                self.pending.pop(data["id"]).set_result(data)
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Network.requestWillBeSent":
                self.requests.append(params["request"]["url"])
            elif method == "Network.responseReceived":
                self.responses[params["response"]["url"]] = params["response"]["status"]
            elif method == "Page.javascriptDialogOpening":
                self.dialogs.append(params["message"])
                # answered from a task: the reply arrives through this very loop
                task = asyncio.create_task(self.send("Page.handleJavaScriptDialog", accept=True))
                self.background.add(task)
            elif method == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Page.loadEventFired":
                self.loaded.set()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        i = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send_json({"id": i, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 60)
        assert "error" not in reply, reply
        return reply["result"]

    async def eval(self, expression: str, *, await_promise: bool = False) -> Any:
        res = await self.send(
            "Runtime.evaluate",
            expression=expression,
            returnByValue=True,
            awaitPromise=await_promise,
        )
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    async def goto(self, url: str, *, timeout: float = 60) -> None:
        """Navigate to ``url`` and wait for its load event."""
        self.loaded.clear()
        await self.send("Page.navigate", url=url)
        await asyncio.wait_for(self.loaded.wait(), timeout)

    async def click(self, selector: str, *, timeout: float = 60) -> None:
        """Click the first element matching ``selector`` and wait for the page it opens."""
        self.loaded.clear()
        found = await self.eval(
            f"(() => {{ const a = document.querySelector({json.dumps(selector)});"
            " if (!a) return false; a.click(); return true; })()"
        )
        assert found, f"nothing matches {selector}"
        await asyncio.wait_for(self.loaded.wait(), timeout)

    async def wait_for(self, expression: str, *, timeout: float = 30) -> Any:
        """Poll ``expression`` until it is truthy; returns its value."""
        for _ in range(int(timeout / 0.1)):
            value = await self.eval(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expression}")

    async def screenshot(self, path: Path, *, width: int = 1400, height: int = 900) -> None:
        """Save a PNG of the page at ``width`` × ``height`` CSS pixels (DevTools captureScreenshot)."""
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


@contextlib.asynccontextmanager
async def open_page(port: int) -> AsyncIterator[Page]:
    """The browser's first page target, with the Network, Page and Runtime domains on."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            target = next(t for t in await r.json() if t["type"] == "page")
        async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = Page(ws)
            for domain in ("Network", "Page", "Runtime"):
                await page.send(f"{domain}.enable")
            try:
                yield page
            finally:
                page.reader.cancel()
