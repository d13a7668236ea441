"""A local stand-in for ``trl vllm-serve`` / ``vllm serve`` on 127.0.0.1, speaking the HTTP
endpoints TRL's ``VLLMClient`` uses for generation: ``/health``, ``/v1/models``,
``/server_info``, ``/get_world_size``, ``/v1/completions`` (token-id prompts, ``n``,
``max_tokens``, ``stop_token_ids``, ``return_token_ids``, ``return_tokens_as_token_ids``,
``logprobs``) and ``/reset_prefix_cache``. Completions come from ``respond(prompt_ids) ->
token ids``, or with ``indexed=True`` from ``respond(prompt_ids, i)`` where ``i`` is the
completion's place in its request (so the copies of one prompt in a GRPO group can differ);
every request body is recorded. Weight transfer (NCCL, GPU-only) has no endpoint
here: tests stub the client's two transport methods instead."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeVLLMServer:
    def __init__(
        self,
        respond: Callable[..., list[int]],
        model: str = "tiny",
        decode: Callable[[list[int]], str] | None = None,
        indexed: bool = False,
    ) -> None:
        self.respond = respond
        self.indexed = indexed
        self.decode = decode or (lambda ids: " ".join(map(str, ids)))
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.completions: list[list[int]] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, body: dict[str, Any], code: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                server.paths.append(path)
                if path == "/health":
                    self._send({})
                elif path == "/v1/models":
                    self._send({"data": [{"id": server.model}]})
                elif path == "/get_world_size":
                    self._send({"world_size": 1})
                elif path == "/server_info":
                    self._send(
                        {"vllm_config": {"model_config": {"logprobs_mode": "processed_logprobs"}}}
                    )
                else:
                    self._send({"error": path}, 404)

            def do_POST(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                server.paths.append(path)
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if path == "/v1/completions":
                    self._send(server._complete(body))
                elif path == "/reset_prefix_cache":
                    self._send({})
                else:
                    self._send({"error": path}, 404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        stops = set(body.get("stop_token_ids") or [])
        choices = []
        for p in prompts:
            for _ in range(int(body.get("n", 1))):
                args = (list(p), len(choices)) if self.indexed else (list(p),)
                ids = list(self.respond(*args))[: int(body.get("max_tokens", 16))]
                cut = next((i + 1 for i, t in enumerate(ids) if t in stops), None)
                ids = ids[:cut] if cut else ids
                self.completions.append(ids)
                choices.append(
                    {
                        "index": len(choices),
                        "text": self.decode(ids),
                        "finish_reason": "stop" if cut else "length",
                        "prompt_token_ids": list(p),
                        "token_ids": ids,
                        "logprobs": {
                            "tokens": [f"token_id:{t}" for t in ids],
                            "token_logprobs": [-0.25] * len(ids),
                            "top_logprobs": [None] * len(ids),
                        },
                    }
                )
        return {
            "id": f"cmpl-{len(self.requests)}",
            "object": "text_completion",
            "created": 0,
            "model": self.model,
            "choices": choices,
        }

    def __enter__(self) -> FakeVLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
