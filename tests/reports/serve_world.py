"""The explorer's test worlds and a real server for them.

``medium_world``: the synthetic world (``ddai fixtures make``) ingested into a log store, plus a
run ``planted`` (the report tests' planted rows: a ``<script>`` in a think, an ``<img onerror>``
answer); ``served``: uvicorn running the app in a thread on a free loopback port; ``local``: a
test client under a name the explorer answers (it refuses TestClient's default "testserver");
``post_sql``: a POST to the SQL box as the SQL page sends it (JSON and the page token).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from report_world import planted_rows
from starlette.testclient import TestClient

from ddai.pipelines import store
from ddai.pipelines.fixtures.make import make_world
from ddai.pipelines.ingest import IngestConfig, ingest


def world_store(root: Path, size: str = "medium") -> tuple[Path, Path]:
    """(world folder, log store): the world's four runs and the planted run ingested."""
    world = root / "world"
    make_world(world, seed=0, size=size)
    logs = root / "logs"
    ingest(IngestConfig(sorted((world / "logs").glob("*.jsonl")), logs, progress=False))
    store.write_run(logs, "planted", planted_rows()["base"])
    return world, logs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(app: object) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 in a background thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(300):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


LOCAL = "http://127.0.0.1"


def local(app: object) -> TestClient:
    return TestClient(app, base_url=LOCAL)


def page_token(client: TestClient) -> str:
    """The page token the SQL page carries in its <meta name="ddai-token">."""
    html = client.get("/sql").text
    return html.split('<meta name="ddai-token" content="')[1].split('"')[0]


def post_sql(client: TestClient, headers: dict | None = None, **kw: object):
    """POST /api/sql as the SQL page does: JSON with the page token."""
    headers = {"X-DDAI-Token": page_token(client), **(headers or {})}
    return client.post("/api/sql", headers=headers, **kw)
