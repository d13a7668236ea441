"""The ``search-http`` backend: a retrieval service over HTTP (DDAI's ColQwen2 API, Search-R1's).

```toml
[backends.ddai_search]
kind = "search-http"
url = "http://127.0.0.1:8000/search"
protocol = "ddai"          # or "search-r1"
top_k = 3                  # results asked and kept per query (default: the caller's k)
batch_size = 32            # queries per HTTP request
concurrency = 4            # requests in flight
timeout_s = 10
max_retries = 2
cache = false              # the default for search: a service's index may change under you
```

Protocols:

- ``ddai``: ``GET {url}?queries=q1&queries=q2`` → ``[[{"idx": 0, "image_file": ".../<deck>_<page>.jpg"},
  …], …]``, one list per query in order; the page id is the image file's basename without its
  extension (DDAI's ``reference_basenames``). The API sends no scores: a result's score is
  ``1 / (rank + 1)``.
- ``search-r1``: ``POST {url}`` with ``{"queries": [...], "topk": k, "return_scores": true}`` →
  ``{"result": [[{"document": {"id": …, "contents": …}, "score": …}, …], …]}``; the page id is
  ``document.id``.

Every request goes through the shared call engine (``engine.Engine``): bounded concurrency, a
per-attempt timeout, retries with backoff on 408/409/429/5xx, timeouts and dropped connections. A
query whose request failed for good comes back as a ``SearchError`` in its slot (``search_batch``)
or is raised (``search``); the environment turns it into a ``[System Error: …]`` observation.
Answers are cached per query (key: url, protocol, top_k, query) only when ``cache = true``. In the
usage ledger ``items`` counts queries; ``calls``, ``ok``, ``attempts`` and ``failed`` count HTTP requests.
A search restricted to one document (``doc``) keeps the results whose page id starts with
``{doc}_``: neither API filters by document.
"""

from __future__ import annotations

import functools
import os
import ssl
import time
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from ddai.pipelines.backends import context as ctx_mod
from ddai.pipelines.backends.base import SearchError, run_sync
from ddai.pipelines.backends.cache import cache_key
from ddai.pipelines.backends.config import BackendSpec, ConfigError
from ddai.pipelines.backends.engine import Engine, EngineSettings, Identity, Job, Outcome
from ddai.pipelines.backends.retry import Failure, RetryPolicy, http_failure
from ddai.pipelines.backends.usage import TokenUsage

PROTOCOLS = ("ddai", "search-r1")
Hits = list[tuple[str, float]]


def page_id_of(image_file: str) -> str:
    """DDAI's page id of an image path: its basename without the extension (``a/b/12_3.jpg`` →
    ``12_3``)."""
    return PurePosixPath(str(image_file).replace("\\", "/")).stem


def parse_ddai(body: Any, n: int) -> list[Hits]:
    """DDAI's answer for ``n`` queries → per query ``[(page_id, score)]`` in rank order."""
    if not isinstance(body, list) or len(body) != n:
        got = f"{len(body)} lists" if isinstance(body, list) else type(body).__name__
        raise ValueError(f"expected a list of {n} result lists (one per query), got {got}")
    out: list[Hits] = []
    for results in body:
        if not isinstance(results, list):
            raise ValueError(f"expected a result list per query, got {type(results).__name__}")
        out.append(
            [(page_id_of(r["image_file"]), 1.0 / (rank + 1)) for rank, r in enumerate(results)]
        )
    return out


def parse_search_r1(body: Any, n: int) -> list[Hits]:
    """Search-R1's answer for ``n`` queries → per query ``[(document id, score)]``."""
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != n:
        raise ValueError(f'expected {{"result": [...]}} with {n} result lists (one per query)')
    out: list[Hits] = []
    for results in result:
        hits: Hits = []
        for rank, r in enumerate(results):
            doc = r.get("document", r) if isinstance(r, dict) else None
            if not isinstance(doc, dict) or "id" not in doc:
                raise ValueError("a search-r1 result has no document id")
            score = r.get("score") if isinstance(r, dict) else None
            hits.append((str(doc["id"]), float(score) if score is not None else 1.0 / (rank + 1)))
        out.append(hits)
    return out


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building one costs ~0.1 s, more than a search."""
    return ssl.create_default_context()


def _classify(exc: BaseException) -> Failure | None:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return Failure("timeout", "the search service did not answer in time", retryable=True)
    if isinstance(exc, httpx.HTTPStatusError):
        r = exc.response
        return http_failure(r.status_code, r.text[:200], r.headers)
    if isinstance(exc, httpx.TransportError):
        return Failure("connection", f"{type(exc).__name__}: {exc}", retryable=True)
    if isinstance(exc, ValueError | KeyError | TypeError):
        return Failure("bad-response", f"{type(exc).__name__}: {exc}")
    return None


class HTTPSearch:
    """A ``Search`` backend served over HTTP; ``search_batch`` sends many queries at once."""

    kind = "search-http"

    def __init__(self, spec: BackendSpec, role: str, context: ctx_mod.Context) -> None:
        opts = spec.options
        url = opts.get("url") or spec.base_url
        if not url:
            raise ConfigError(
                f'[backends.{spec.name}] (kind "search-http") needs `url`, '
                'e.g. url = "http://127.0.0.1:8000/search"'
            )
        protocol = str(opts.get("protocol", "ddai"))
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"[backends.{spec.name}] protocol {protocol!r} is unknown; use one of: "
                f"{', '.join(PROTOCOLS)}"
            )
        self.spec = spec
        self.role = role
        self.name = spec.name
        self.context = context
        self.url = str(url)
        self.protocol = protocol
        self.top_k = int(opts["top_k"]) if opts.get("top_k") is not None else None
        self.batch_size = max(int(opts.get("batch_size", 32)), 1)
        self.cache = context.cache
        self.engine = Engine(
            Identity(spec.name, spec.kind, self.url, role),
            EngineSettings(
                concurrency=spec.concurrency,
                timeout_s=spec.timeout_s,
                retry=RetryPolicy(
                    max_retries=spec.max_retries,
                    base_s=float(opts.get("backoff_base_s", 0.5)),
                    cap_s=float(opts.get("backoff_cap_s", 30.0)),
                ),
            ),
            classify=_classify,
            cache=None,  # cached per query below, not per request
            ledger=context.ledger,
            progress=bool(context.progress),  # one bar per turn would drown a training log
        )

    @classmethod
    def from_spec(cls, spec: BackendSpec, role: str, **context: Any) -> HTTPSearch:
        return cls(spec, role, ctx_mod.make(role, use_cache=spec.cache, **context))

    # ------------------------------------------------------------------ the Search protocol
    def search(self, query: str, k: int = 5, doc: str | None = None) -> Hits:
        """Ranked ``(page_id, score)`` for one query; raises ``SearchError`` when it failed."""
        (out,) = self.search_batch([(query, doc)], k)
        if isinstance(out, SearchError):
            raise out
        return out

    def search_batch(
        self, requests: Sequence[tuple[str, str | None]], k: int = 5
    ) -> list[Hits | SearchError]:
        """``(query, doc)`` pairs → per pair its hits or the ``SearchError`` it failed with.
        Repeated queries are asked once."""
        return run_sync(self.asearch_batch(requests, k))

    async def asearch_batch(
        self, requests: Sequence[tuple[str, str | None]], k: int = 5
    ) -> list[Hits | SearchError]:
        keep = self.top_k or k
        queries = list(dict.fromkeys(q for q, _ in requests))
        found: dict[str, Hits | SearchError] = {}
        keys = {q: self._key(q, keep) for q in queries}
        site = self.engine.ledger.site(self.context.call_site, self.name, self.url)
        if self.cache is not None:
            hits = self.cache.get_many(keys.values())
            for q in queries:
                if keys[q] in hits:
                    found[q] = [(str(p), float(s)) for p, s in hits[keys[q]].value]
            site.items += len(found)
            site.cache_hits += len(found)
        todo = [q for q in queries if q not in found]
        chunks = [todo[i : i + self.batch_size] for i in range(0, len(todo), self.batch_size)]
        if chunks:
            import httpx

            async with httpx.AsyncClient(
                timeout=self.spec.timeout_s, headers=self._headers(), verify=_ssl_context()
            ) as client:
                jobs = [self._job(client, chunk, keep) for chunk in chunks]
                outs = await self.engine.run(jobs, call_site=self.context.call_site)
            site.items += len(todo) - len(chunks)  # the engine counted requests; count queries
            for chunk, out in zip(chunks, outs, strict=True):
                if isinstance(out, Failure):
                    err = SearchError(out.reason, out.detail)
                    found.update((q, err) for q in chunk)
                    continue
                for q, hits in zip(chunk, out.value, strict=True):
                    found[q] = [(str(p), float(s)) for p, s in hits]
                    if self.cache is not None:
                        self.cache.put(
                            keys[q],
                            found[q],
                            TokenUsage(),
                            kind=self.kind,
                            model=self.url,
                            role=self.role,
                        )
        return [self._restrict(found[q], doc, keep) for q, doc in requests]

    # ------------------------------------------------------------------ backend chores
    async def ping(self) -> dict[str, Any]:
        """One real query (neither API has a health route): ``{ok, latency_s, detail}``."""
        t0 = time.perf_counter()
        (out,) = await self.asearch_batch([("ping", None)], self.top_k or 5)
        latency = round(time.perf_counter() - t0, 3)
        if isinstance(out, SearchError):
            return {"ok": False, "latency_s": latency, "detail": str(out)}
        return {
            "ok": True,
            "latency_s": latency,
            "detail": f"{self.protocol} search at {self.url}: {len(out)} result(s) for 'ping'",
        }

    def usage(self) -> dict[str, dict[str, Any]]:
        return self.context.ledger.snapshot()

    async def aclose(self) -> None:
        return None

    # ------------------------------------------------------------------ internals
    def _key(self, query: str, keep: int) -> str:
        return cache_key(
            kind=self.kind, url=self.url, protocol=self.protocol, top_k=keep, query=query
        )

    def _headers(self) -> dict[str, str]:
        var = self.spec.api_key_env
        key = os.environ.get(var) if var else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _job(self, client: Any, chunk: list[str], keep: int) -> Job:
        async def call() -> Outcome:
            if self.protocol == "ddai":
                r = await client.get(self.url, params=[("queries", q) for q in chunk])
                r.raise_for_status()
                hits = parse_ddai(r.json(), len(chunk))
            else:
                payload = {"queries": chunk, "topk": keep, "return_scores": True}
                r = await client.post(self.url, json=payload)
                r.raise_for_status()
                hits = parse_search_r1(r.json(), len(chunk))
            return Outcome([[list(h) for h in hs] for hs in hits])

        return Job(key=cache_key(chunk=chunk, keep=keep), call=call)

    @staticmethod
    def _restrict(out: Hits | SearchError, doc: str | None, keep: int) -> Hits | SearchError:
        if isinstance(out, SearchError):
            return out
        if doc is not None:
            out = [(p, s) for p, s in out if p.startswith(f"{doc}_")]
        return out[:keep]
