"""Fake model servers on 127.0.0.1 that speak the OpenAI and Gemini wire protocols.

Test scaffolding, not part of the package: tests and benchmarks point the real ``openai`` and
``google-genai`` SDKs at them (no key, no network); aiohttp, which serves them, is a dev extra.
A benchmark runs one in its own process with ``python -m support.fakes`` (``tests/`` on the path).
Routes:

- ``POST /v1/chat/completions`` and ``POST /v1/responses`` (OpenAI; also under any prefix);
- ``POST /v1/embeddings`` (OpenAI texts, or vLLM's chat form with images: ``fake_embedding``);
- ``POST /{version}/models/{model}:generateContent`` (Gemini; routed on the ``:generateContent``
  suffix, since the SDK's default API version differs between releases);
- ``GET /v1/models`` and ``GET /{version}/models/{model}`` (cheap pings);
- ``GET /_fake/stats`` (the counters, for a server in another process).

``parts`` keeps each model request's text and image parts in order (images as sha256 of their
bytes), so a test can check which images a prompt showed, and where.

Misbehaviour on demand:

- ``latency_s``: every model request waits this long before answering;
- ``script``: faults for the first requests in arrival order, e.g. ``["429", "429"]``;
- a marker in the prompt: ``[[fault:NAME]]`` on every request carrying it, ``[[fault:NAME*N]]``
  on the first N of them (keyed by the prompt text).

Fault names: an HTTP status (``429`` with ``retry-after: retry_after_s``, ``500``, ``503``, ...),
``malformed`` (a truncated JSON body), ``badjson`` (a well-formed response whose answer text is
not JSON), ``nochoices`` (a chat completion whose ``choices`` list is empty), ``hang`` (no
answer until ``hang_s`` passes or the server stops).

``responder(prompt_text) -> answer_text`` makes the model's answer; the default one plays each
role from its default prompt (``default_responder``).

Longer than 400 lines because it serves both wire protocols (OpenAI chat and responses, Gemini)
with their streaming and error modes, for tests and benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from ddai.pipelines.records import metrics

Responder = Callable[[str], str]
_MARKER = re.compile(r"\[\[fault:(\w+)(?:\*(\d+))?\]\]")
_MODEL_ROUTES = ("chat", "responses", "gemini", "embeddings")


# ---------------------------------------------------------------- the default model


def _field(text: str, label: str) -> str | None:
    m = re.search(rf"^{re.escape(label)}:[ \t]*(.*)$", text, flags=re.MULTILINE)
    return m.group(1).strip() if m else None


def default_responder(text: str) -> str:
    """Answer as each default prompt asks, deterministically.

    Judge: ``{"score": 1.0}`` when the generated answer equals the reference after normalization, else
    0.0. Verifier: ``ok`` when the ground truth occurs in the page text, else ``wrong``. Rewriter:
    every think prefixed with ``Plan:``. Anything else: the first word after ``Question:``
    reversed, a stand-in answer.
    """
    ref = _field(text, "Reference answer")
    cand = _field(text, "Generated answer")
    if ref is not None and cand is not None:
        same = metrics.normalize_answer(ref) == metrics.normalize_answer(cand)
        return json.dumps({"score": 1.0 if same else 0.0, "reason": "match" if same else "differs"})
    gt = _field(text, "Ground-truth answer")
    if gt is not None:
        page = text.split("Page text:", 1)[-1]
        found = metrics.normalize_answer(gt) in metrics.normalize_answer(page)
        return json.dumps({"verdict": "ok" if found else "wrong", "reason": "fake verifier"})
    thinks = re.findall(r"^\[\d+\] (.*)$", text, flags=re.MULTILINE)
    if "Thinks (" in text:
        return json.dumps({"thinks": [f"Plan: {t}" for t in thinks]})
    q = _field(text, "Question") or ""
    return (q.split() or ["none"])[0][::-1]


# ---------------------------------------------------------------- wire formats


def _content_texts(content: Any) -> list[str]:
    """The text of an OpenAI message's ``content``: a string, or the text of its parts."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p.get("text", "") for p in content if isinstance(p, dict)]
    return []


def _openai_chat_text(body: dict[str, Any]) -> str:
    return "\n".join(
        t for msg in body.get("messages", []) for t in _content_texts(msg.get("content"))
    )


def _openai_responses_text(body: dict[str, Any]) -> str:
    out = [body.get("instructions") or ""]
    inp = body.get("input")
    if isinstance(inp, str):
        out.append(inp)
    elif isinstance(inp, list):
        for item in inp:
            out.extend(_content_texts(item.get("content") if isinstance(item, dict) else None))
    return "\n".join(out)


def _gemini_text(body: dict[str, Any]) -> str:
    out = []
    system = body.get("systemInstruction") or body.get("system_instruction") or {}
    out.extend(p.get("text", "") for p in system.get("parts", []))
    for content in body.get("contents", []):
        out.extend(p.get("text", "") for p in content.get("parts", []) if "text" in p)
    return "\n".join(out)


def _count_images(node: Any) -> int:
    """Image parts anywhere in a request body: OpenAI chat ``image_url``, Responses
    ``input_image``, Gemini ``inlineData``."""
    if isinstance(node, dict):
        own = (
            node.get("type") in ("image_url", "input_image")
            or "inlineData" in node
            or "inline_data" in node
        )
        return int(own) + sum(_count_images(v) for v in node.values())
    if isinstance(node, list):
        return sum(_count_images(v) for v in node)
    return 0


def _image_bytes(node: dict[str, Any]) -> bytes | None:
    """The bytes of an image part (OpenAI data URL or Gemini inline data), else None."""
    if node.get("type") == "image_url":
        url = str((node.get("image_url") or {}).get("url", ""))
    elif node.get("type") == "input_image":
        url = str(node.get("image_url", ""))
    elif isinstance(node.get("inlineData") or node.get("inline_data"), dict):
        url = "," + str((node.get("inlineData") or node.get("inline_data"))["data"])
    else:
        return None
    payload = url.partition(",")[2]
    # Standard or URL-safe base64 (the SDKs differ), padding optional.
    return base64.b64decode(payload + "=" * (-len(payload) % 4), altchars=b"-_")


def request_parts(node: Any) -> list[tuple[str, str]]:
    """A request body's text and image parts in the order it carries them: ``("text", text)`` or
    ``("image", sha256 of the image bytes)``, for OpenAI chat and Responses and Gemini bodies."""
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        data = _image_bytes(node)
        if data is not None:
            return [("image", hashlib.sha256(data).hexdigest())]
        if node.get("type") in (None, "text", "input_text") and isinstance(node.get("text"), str):
            return [("text", node["text"])]
        if isinstance(node.get("content"), str):
            return [("text", node["content"])]
        for v in node.values():
            out += request_parts(v)
    elif isinstance(node, list):
        for v in node:
            out += request_parts(v)
    return out


def fake_embedding(parts: list[tuple[str, str]], dim: int) -> list[float]:
    """A deterministic unit vector for what one embedding input carried (text and image parts in
    order): the same input always maps to the same vector, another image to another one."""
    seed = int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:8], "little")
    rng = random.Random(seed)
    vec = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = sum(x * x for x in vec) ** 0.5
    return [x / norm for x in vec]


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _chat_body(model: str, content: str, prompt: str) -> dict[str, Any]:
    p, c = _tokens(prompt), _tokens(content)
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    }


def _responses_body(model: str, content: str, prompt: str) -> dict[str, Any]:
    p, c = _tokens(prompt), _tokens(content)
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": time.time(),
        "model": model,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 0.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "output": [
            {
                "type": "message",
                "id": "msg_fake",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": p,
            "output_tokens": c,
            "total_tokens": p + c,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _gemini_body(model: str, content: str, prompt: str) -> dict[str, Any]:
    p, c = _tokens(prompt), _tokens(content)
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": content}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": p,
            "candidatesTokenCount": c,
            "totalTokenCount": p + c,
        },
        "modelVersion": model,
        "responseId": "fake",
    }


# ---------------------------------------------------------------- the server


class FakeModelServer:
    """An aiohttp server on a background thread; use as a context manager."""

    def __init__(
        self,
        *,
        responder: Responder = default_responder,
        latency_s: float = 0.0,
        script: Sequence[str] = (),
        retry_after_s: float | None = 0.0,
        hang_s: float = 30.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder = responder
        self.latency_s = latency_s
        self.script = list(script)
        self.retry_after_s = retry_after_s
        self.hang_s = hang_s
        self.host = host
        self.port = port
        self.counts: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.images = 0  # image parts received
        self.embed_dim = 16  # width of the fake embeddings
        self.parts: list[list[tuple[str, str]]] = []  # each model request's parts, in arrival order
        self.credentials: set[str] = set()  # what clients sent as keys (memory only, for tests)
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    # ------------------------------------------------------------------ addresses and counters
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def requests(self) -> int:
        """Requests answered by the fake's own routes (model requests here; pings and stats
        excluded)."""
        return self.stats()["requests"]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": sum(n for k, n in self.counts.items() if k in _MODEL_ROUTES),
                "counts": dict(self.counts),
                "faults": dict(self.faults),
                "max_in_flight": self.max_in_flight,
            }

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.faults.clear()
            self._seen.clear()
            self.max_in_flight = 0
            self.images = 0
            self.parts.clear()
            self.credentials.clear()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeModelServer:
        self._thread = threading.Thread(target=self._serve, name="fake-model-server", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)
        if self._start_error is not None:
            raise RuntimeError(
                f"fake server failed to start: {self._start_error}"
            ) from self._start_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # surfaced to start()
            self._start_error = e
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = self.app()
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await self._runner.cleanup()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/_fake/stats", self._stats)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    # ------------------------------------------------------------------ handlers
    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "GET":
            if path.endswith("/models"):
                return web.json_response(
                    {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
                )
            if "/models/" in path:
                name = path.rsplit("/models/", 1)[1]
                return web.json_response({"name": f"models/{name}", "displayName": name})
            return self._not_found(path)
        if path.endswith("/embeddings"):
            return await self._embeddings(request)
        if path.endswith("/chat/completions"):
            kind, extract, build = "chat", _openai_chat_text, _chat_body
        elif path.endswith("/responses"):
            kind, extract, build = "responses", _openai_responses_text, _responses_body
        elif path.endswith(":generateContent"):
            kind, extract, build = "gemini", _gemini_text, _gemini_body
        else:
            return self._not_found(path)
        body = await request.json()
        model = body.get("model") or path.rsplit("/models/", 1)[-1].split(":", 1)[0]
        prompt = extract(body)
        self._note_request(request, body)
        fault = self._admit(kind, prompt)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            return await self._answer(kind, fault, model, prompt, build)
        finally:
            self.in_flight -= 1

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/embeddings``: ``input`` texts, or vLLM's chat form (``messages`` with
        images and text): one vector per input, a pure function of what was sent."""
        body = await request.json()
        if "messages" in body:
            inputs = [request_parts(body["messages"])]
        else:
            raw = body.get("input")
            inputs = [[("text", str(t))] for t in (raw if isinstance(raw, list) else [raw])]
        self._note_request(request, body, parts=[p for one in inputs for p in one])
        fault = self._admit("embeddings", json.dumps(body.get("input", "")) + str(inputs))
        if fault and fault.isdigit():
            return self._error("embeddings", int(fault))
        data = [
            {"object": "embedding", "index": i, "embedding": fake_embedding(parts, self.embed_dim)}
            for i, parts in enumerate(inputs)
        ]
        n = sum(_tokens(v) if k == "text" else 258 for one in inputs for k, v in one)
        return web.json_response(
            {
                "object": "list",
                "model": body.get("model", "fake"),
                "data": data,
                "usage": {"prompt_tokens": n, "total_tokens": n},
            }
        )

    def _note_request(
        self, request: web.Request, body: dict[str, Any], parts: list | None = None
    ) -> None:
        auth = request.headers.get("Authorization", "").removeprefix("Bearer ")
        key = request.headers.get("x-goog-api-key", "")
        n_images = _count_images(body)
        parts = request_parts(body) if parts is None else parts
        with self._lock:
            self.credentials.update(k for k in (auth, key) if k)
            self.images += n_images
            self.parts.append(parts)

    def _admit(self, kind: str, prompt: str) -> str | None:
        """Count the request and pick its fault (script first, then the prompt's marker)."""
        with self._lock:
            self.counts[kind] += 1
            if self.script:
                fault: str | None = self.script.pop(0)
            else:
                fault = None
                m = _MARKER.search(prompt)
                if m:
                    digest = hashlib.sha1(prompt.encode()).hexdigest()
                    self._seen[digest] += 1
                    limit = int(m.group(2)) if m.group(2) else None
                    if limit is None or self._seen[digest] <= limit:
                        fault = m.group(1)
            if fault and fault != "ok":
                self.faults[fault] += 1
            return fault

    async def _answer(
        self, kind: str, fault: str | None, model: str, prompt: str, build
    ) -> web.StreamResponse:
        if fault == "hang":
            return await self._hang()
        if fault and fault.isdigit():
            return self._error(kind, int(fault))
        if fault == "malformed":
            return web.Response(
                status=200, text='{"id": "x", "choices": [', content_type="application/json"
            )
        content = "the score is high" if fault == "badjson" else self.responder(prompt)
        body = build(model, content, prompt)
        if fault == "nochoices" and "choices" in body:
            body["choices"] = []
        return web.json_response(body)

    def _error(self, kind: str, status: int) -> web.Response:
        headers = {}
        if status == 429 and self.retry_after_s is not None:
            headers["retry-after"] = f"{self.retry_after_s:g}"
        if kind == "gemini":
            body = {
                "error": {
                    "code": status,
                    "message": f"fake error {status}",
                    "status": "UNAVAILABLE",
                }
            }
        else:
            body = {
                "error": {"message": f"fake error {status}", "type": "fake_error", "code": None}
            }
        return web.json_response(body, status=status, headers=headers)

    async def _hang(self) -> web.Response:
        """The ``hang`` fault: no answer until ``hang_s`` passes or the server stops."""
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=self.hang_s)
        return web.Response(status=504, text="hung")

    @staticmethod
    def _not_found(path: str) -> web.Response:
        return web.json_response(
            {"error": {"message": f"no route {path}", "code": 404}}, status=404
        )


# ---------------------------------------------------------------- a server in its own process


class RecordingServer(FakeModelServer):
    """The fake server, keeping every model request's JSON body in ``bodies`` (arrival order)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.bodies: list[dict[str, Any]] = []

    def _note_request(
        self, request: web.Request, body: dict[str, Any], parts: list | None = None
    ) -> None:
        super()._note_request(request, body, parts)
        self.bodies.append(body)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a fake server in the foreground; prints ``PORT <n>`` once it listens (for benchmarks,
    which keep the server off the client's interpreter)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.0, help="seconds each model request waits")
    ap.add_argument("--port", type=int, default=0, help="port to bind on 127.0.0.1 (0: any free)")
    args = ap.parse_args(argv)
    serve_in_foreground(FakeModelServer(latency_s=args.latency, port=args.port))


def serve_in_foreground(server: FakeModelServer) -> None:
    """Start ``server``, print ``PORT <n>`` and serve until the parent closes our stdin."""
    server.start()
    print(f"PORT {server.port}", flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()


def spawn(module: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    """Start ``python -m module *args`` (``support.fakes`` or ``support.fakes_search``) with
    ``tests/`` on its path; returns the process and the port it listens on. Close its stdin to
    stop it."""
    tests = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "PORT":
        proc.kill()
        raise RuntimeError(f"fake server {module} did not start (said {line!r})")
    return proc, int(line[1])


if __name__ == "__main__":
    main()
