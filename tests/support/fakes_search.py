"""A fake search service on 127.0.0.1 that speaks DDAI's and Search-R1's wire protocols.

Test scaffolding, not part of the package (aiohttp is a dev extra): tests point the
``search-http`` backend at it. Routes:

- ``GET /search?queries=q1&queries=q2`` (DDAI): ``[[{"idx": 0, "image_file":
  "./search_engine/corpus/img/<page>.jpg"}, …], …]``, one list per query;
- ``POST /search`` (DDAI's trainer, AGENTS.md "Search API contract"): ``[{"query", "id",
  "request_idx"}, …]`` → ``[{"request_idx", "results": [{"idx", "image_file"}, …]}, …]``; the
  ranking is restricted to the pages of document ``id`` (``{id}_…``; ``"-1"``: all pages) unless
  ``ignore_id`` (a service that ignores the restriction); ``batch_answered`` keeps
  ``(query, id, pages)`` per answered request in arrival order;
- ``GET /health`` (DDAI's API): ``{"status": health}``; ``health`` may also be an HTTP status
  (``"500"``) or None (no route: 404);
- ``POST /retrieve`` (Search-R1): ``{"queries": [...], "topk": k, "return_scores": true}`` →
  ``{"result": [[{"document": {"id": page, "contents": …}, "score": …}, …], …]}``;
- ``GET /_fake/stats``: the counters.

``ranker(query) -> [page ids]`` makes the ranking (default: ``top_k`` pages of ``pages`` picked by
a hash of the query, so a query always gets the same pages). Every answered query and its pages
go to ``answered`` in arrival order; ``requests`` counts search requests, ``queries`` the queries
they carried (failed requests included); each request waits ``latency_s`` first. Faults, as in ``FakeModelServer``: ``script`` holds
faults for the first requests in arrival order, ``fault`` one for every request after it; names
are HTTP statuses (``500``, ``503``, ...) and ``hang`` (no answer until ``hang_s`` passes or the
server stops).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from support.fakes import FakeModelServer, serve_in_foreground

Ranker = Callable[[str], list[str]]


def hash_ranker(pages: Sequence[str], top_k: int = 3) -> Ranker:
    """``top_k`` distinct pages chosen by the query's sha1 (deterministic, order matters)."""
    pool = list(pages)
    if not pool:
        raise ValueError("a fake search service needs at least one page id")

    def rank(query: str) -> list[str]:
        h = int(hashlib.sha1(query.encode("utf-8")).hexdigest(), 16)
        start = h % len(pool)
        return [pool[(start + i) % len(pool)] for i in range(min(top_k, len(pool)))]

    return rank


class FakeSearchServer(FakeModelServer):
    """An aiohttp search service on a background thread; use as a context manager."""

    def __init__(
        self,
        *,
        pages: Sequence[str] = (),
        ranker: Ranker | None = None,
        top_k: int = 3,
        script: Sequence[str] = (),
        fault: str | None = None,
        latency_s: float = 0.0,
        hang_s: float = 30.0,
        health: str | None = "healthy",
        ignore_id: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(script=script, latency_s=latency_s, hang_s=hang_s, host=host, port=port)
        self.ranker = ranker or hash_ranker(pages, top_k)
        self.pages = list(pages)
        self.top_k = top_k
        self.fault = fault
        self.health = health
        self.ignore_id = ignore_id
        self.search_requests = 0
        self.queries = 0
        self.health_requests = 0
        self.answered: list[tuple[str, list[str]]] = []
        self.batch_answered: list[tuple[str, str, list[str]]] = []

    @property
    def ddai_url(self) -> str:
        return f"{self.url}/search"

    @property
    def search_r1_url(self) -> str:
        return f"{self.url}/retrieve"

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.search_requests,
                "queries": self.queries,
                "answered": len(self.answered),
                "faults": dict(self.faults),
            }

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.search_requests = self.queries = self.health_requests = 0
            self.answered.clear()
            self.batch_answered.clear()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/_fake/stats", self._stats)
        app.router.add_get("/search", self._ddai)
        app.router.add_post("/search", self._ddai_batch)
        if self.health is not None:
            app.router.add_get("/health", self._health)
        app.router.add_post("/retrieve", self._search_r1)
        return app

    # ------------------------------------------------------------------ handlers
    async def _ddai(self, request: web.Request) -> web.StreamResponse:
        queries = request.query.getall("queries", [])
        failed = await self._fault(len(queries))
        if failed is not None:
            return failed
        body = [
            [
                {"idx": i, "image_file": f"./search_engine/corpus/img/{p}.jpg"}
                for i, p in enumerate(self._rank(q))
            ]
            for q in queries
        ]
        return web.json_response(body)

    async def _ddai_batch(self, request: web.Request) -> web.StreamResponse:
        items = await request.json()
        failed = await self._fault(len(items))
        if failed is not None:
            return failed
        body = []
        for item in items:
            query, doc = str(item["query"]), str(item["id"])
            pages = self._rank_in(query, doc)
            with self._lock:
                self.batch_answered.append((query, doc, pages))
            results = [
                {"idx": i, "image_file": f"./search_engine/corpus/img/{p}.jpg"}
                for i, p in enumerate(pages)
            ]
            body.append({"request_idx": item["request_idx"], "results": results})
        return web.json_response(body)

    def _rank_in(self, query: str, doc: str) -> list[str]:
        """The ranking over document ``doc``'s pages (all pages for ``-1`` or ``ignore_id``)."""
        if doc == "-1" or self.ignore_id:
            return self._rank(query)
        own = [p for p in self.pages if p.startswith(f"{doc}_")]
        return hash_ranker(own, self.top_k)(query) if own else []

    async def _health(self, request: web.Request) -> web.Response:
        with self._lock:
            self.health_requests += 1
        if self.health is not None and self.health.isdigit():
            return web.json_response({"error": "fake health error"}, status=int(self.health))
        return web.json_response({"status": self.health, "active_gpus": 1})

    async def _search_r1(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        queries = list(payload.get("queries") or [])
        topk = int(payload.get("topk") or 3)
        failed = await self._fault(len(queries))
        if failed is not None:
            return failed
        result = [
            [
                {"document": {"id": p, "contents": f"page {p}"}, "score": 1.0 / (i + 1)}
                for i, p in enumerate(self._rank(q)[:topk])
            ]
            for q in queries
        ]
        return web.json_response({"result": result})

    def _rank(self, query: str) -> list[str]:
        pages = self.ranker(query)
        with self._lock:
            self.answered.append((query, list(pages)))
        return pages

    async def _fault(self, n_queries: int) -> web.Response | None:
        with self._lock:
            self.search_requests += 1
            self.queries += n_queries
            fault = self.script.pop(0) if self.script else self.fault
            if fault and fault != "ok":
                self.faults[fault] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if not fault or fault == "ok":
            return None
        if fault == "hang":
            return await self._hang()
        return web.json_response({"error": f"fake error {fault}"}, status=int(fault))


def main(argv: Sequence[str] | None = None) -> None:
    """Run a fake search service in the foreground; prints ``PORT <n>`` once it listens (for
    benchmarks, which keep the server off the client's interpreter)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.0, help="seconds each request waits")
    ap.add_argument("--pages", nargs="+", default=["1_1", "1_2", "2_1"], help="page ids served")
    ap.add_argument("--top-k", type=int, default=3, help="pages per query")
    ap.add_argument("--port", type=int, default=0, help="port to bind on 127.0.0.1 (0: any free)")
    args = ap.parse_args(argv)
    serve_in_foreground(
        FakeSearchServer(pages=args.pages, top_k=args.top_k, latency_s=args.latency, port=args.port)
    )


if __name__ == "__main__":
    main()


def search_http_backend(url: str, protocol: str, **table: Any) -> Any:
    """The ``search-http`` backend ``svc`` at ``url`` speaking ``protocol``, quick to give up (2 s
    timeout, 10 ms backoff); ``table``: its other config keys."""
    from ddai.pipelines.backends import get_backend

    svc = {"kind": "search-http", "url": url, "protocol": protocol, "timeout_s": 2}
    svc |= {"backoff_base_s": 0.01, **table}
    return get_backend("search", "svc", config={"backends": {"svc": svc}})
