"""The ``search-http`` backend: a retrieval service over HTTP (DDAI's ColQwen2 API, Search-R1's).

```toml
[backends.ddai_search]
kind = "search-http"
url = "http://127.0.0.1:8000/search"
protocol = "ddai"          # or "ddai-batch" (DDAI's trainer), "search-r1"
health_url = "http://127.0.0.1:8000/health"  # the default: /health at the url's host
top_k = 10                 # results asked and kept per query (default: the caller's k; DDAI: 10)
batch_size = 32            # queries per HTTP request
concurrency = 4            # requests in flight
timeout_s = 10
max_retries = 2
cache = false              # the default for search: a service's index may change under you
```

Protocols:

- ``ddai``: ``GET {url}?queries=q1&queries=q2`` (the bundled ``search_engine_api.py``) →
  ``[[{"idx": 0, "image_file": ".../<deck>_<page>.jpg"}, …], …]``, one list per query in order;
  the page id is the image file's basename without its extension (DDAI's
  ``reference_basenames``). The API sends no scores: a result's score is ``1 / (rank + 1)``.
- ``ddai-batch``: what DDAI's trainer sends (``vrag_agent/generation.py``, AGENTS.md "Search API
  contract"): ``POST {url}`` with ``[{"query", "id", "request_idx"}, …]`` →
  ``[{"request_idx", "results": [{"image_file", …}, …]}, …]``, read back by ``request_idx``.
  ``id`` is the document the search is restricted to: the caller's ``doc`` (the training
  environment passes the number DDAI derives from the prompt's uid,
  ``prompt_row.ddai_search_id``), ``"-1"`` for none. The service does the restriction; a result
  of another document is an error for that query (``off-document``), not filtered away: it
  means the service ignores ``id`` (or the uid's number is not the document), and filtering
  would turn that into short or empty result lists that read as bad queries.
- ``search-r1``: ``POST {url}`` with ``{"queries": [...], "topk": k, "return_scores": true}`` →
  ``{"result": [[{"document": {"id": …, "contents": …}, "score": …}, …], …]}``; the page id is
  ``document.id``.

``health_url`` (default: ``/health`` at the url's host, as DDAI's API serves it) is asked first
by ``ping`` and the training preflight: a 404 or 405 means the service has no such route (a
real query then stands in), any other non-2xx, or ``{"status": "unhealthy"}``, is a failure
naming the URL.

Every request goes through the shared call engine (``engine.Engine``): bounded concurrency, a
per-attempt timeout, retries with backoff on 408/409/429/5xx, timeouts and dropped connections. A
query whose request failed for good comes back as a ``SearchError`` in its slot (``search_batch``)
or is raised (``search``); the environment turns it into a ``[System Error: …]`` observation.
Answers are cached per query (key: url, protocol, top_k, query, and the document for
``ddai-batch``) only when ``cache = true``. In the usage ledger ``items`` counts queries;
``calls``, ``ok``, ``attempts`` and ``failed`` count HTTP requests.
With ``ddai`` and ``search-r1``, a search restricted to one document (``doc``) keeps the results
whose page id starts with ``{doc}_``: neither API filters by document.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ddai.pipelines.backends import context as ctx_mod
from ddai.pipelines.backends.base import SearchError, run_sync
from ddai.pipelines.backends.cache import cache_key
from ddai.pipelines.backends.config import BackendSpec, ConfigError
from ddai.pipelines.backends.engine import Engine, EngineSettings, Identity, Job, Outcome
from ddai.pipelines.backends.retry import Failure, http_failure
from ddai.pipelines.backends.usage import TokenUsage

PROTOCOLS = ("ddai", "ddai-batch", "search-r1")
Hits = list[tuple[str, float]]
NO_DOC = "-1"
"""The ``id`` DDAI's trainer sends when a uid names no document."""


def page_id_of(image_file: str) -> str:
    """DDAI's page id of an image path: its basename without the extension (``a/b/12_3.jpg`` →
    ``12_3``)."""
    return PurePosixPath(str(image_file).replace("\\", "/")).stem


def parse_ddai(body: Any, n: int) -> list[Hits]:
    """DDAI's answer for ``n`` queries → per query ``[(page_id, score)]`` in rank order."""
    if not isinstance(body, list) or len(body) != n:
        got = f"{len(body)} lists" if isinstance(body, list) else type(body).__name__
        raise ValueError(f"expected a list of {n} result lists (one per query), got {got}")
    for results in body:
        if not isinstance(results, list):
            raise ValueError(f"expected a result list per query, got {type(results).__name__}")
    return [_ranked_pages(results) for results in body]


def _ranked_pages(results: list[Any]) -> Hits:
    """DDAI's results for one query → ``[(page_id, 1 / (rank + 1))]`` (the API sends no scores)."""
    return [(page_id_of(r["image_file"]), 1.0 / (rank + 1)) for rank, r in enumerate(results)]


def parse_ddai_batch(body: Any, request_idxs: Sequence[int]) -> list[Hits]:
    """The ``ddai-batch`` answer ``[{"request_idx", "results": [...]}]`` → per request of
    ``request_idxs`` (in that order) ``[(page_id, score)]``; a request the answer lacks, or
    answers twice, is an error (DDAI's trainer would read an empty result list)."""
    if not isinstance(body, list):
        raise ValueError(f"expected a list of {{request_idx, results}}, got {type(body).__name__}")
    by_idx: dict[int, Any] = {}
    for item in body:
        if not isinstance(item, dict) or "request_idx" not in item:
            raise ValueError("an answer item has no request_idx")
        idx = int(item["request_idx"])
        if idx in by_idx:
            raise ValueError(f"request_idx {idx} answered twice")
        by_idx[idx] = item.get("results")
    missing = [i for i in request_idxs if i not in by_idx]
    if missing:
        raise ValueError(f"no answer for request_idx {missing[:5]} ({len(missing)} missing)")
    for i in request_idxs:
        if not isinstance(by_idx[i], list):
            raise ValueError(f"request_idx {i}: results is {type(by_idx[i]).__name__}, not a list")
    return [_ranked_pages(by_idx[i]) for i in request_idxs]


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


class HTTPSearch(ctx_mod.Backend):
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
        super().__init__(spec, role, context)
        self.url = str(url)
        self.protocol = protocol
        # The training environment restricts every search to the prompt's document, as
        # DDAI's trainer does with this protocol (``env.search_doc``).
        self.restricts_by_uid = protocol == "ddai-batch"
        self.top_k = int(opts["top_k"]) if opts.get("top_k") is not None else None
        self.batch_size = max(int(opts.get("batch_size", 32)), 1)
        self.cache = context.cache
        self.engine = Engine(
            Identity(spec.name, spec.kind, self.url, role),
            EngineSettings.of(spec),
            classify=_classify,
            cache=None,  # cached per query below, not per request
            ledger=context.ledger,
            progress=bool(context.progress),  # one bar per turn would drown a training log
        )

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
        asks = [self._ask(q, doc) for q, doc in requests]
        units = list(dict.fromkeys(asks))  # (query, the document sent), each asked once
        found: dict[tuple[str, str | None], Hits | SearchError] = {}
        keys = {u: self._key(u, keep) for u in units}
        site = self.engine.ledger.site(self.context.call_site, self.name, self.url)
        if self.cache is not None:
            hits = self.cache.get_many(keys.values())
            for u in units:
                if keys[u] in hits:
                    found[u] = [(str(p), float(s)) for p, s in hits[keys[u]].value]
            site.items += len(found)
            site.cache_hits += len(found)
        todo = [u for u in units if u not in found]
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
                    found.update((u, err) for u in chunk)
                    continue
                for u, hits in zip(chunk, out.value, strict=True):
                    found[u] = [(str(p), float(s)) for p, s in hits]
                    if self.cache is not None:
                        self.cache.put(
                            keys[u],
                            found[u],
                            TokenUsage(),
                            kind=self.kind,
                            model=self.url,
                            role=self.role,
                            endpoint=f"{self.kind} {self.url} {self.protocol}",
                        )
        return [
            self._restrict(found[u], u[1], doc, keep)
            for u, (_, doc) in zip(asks, requests, strict=True)
        ]

    # ------------------------------------------------------------------ backend chores
    @property
    def health_url(self) -> str:
        """``health_url``, else ``/health`` at the url's scheme and host (DDAI's API)."""
        explicit = self.spec.options.get("health_url")
        if explicit:
            return str(explicit)
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, "/health", "", ""))

    async def ahealth(self) -> dict[str, Any]:
        """``GET health_url``: ``{ok, route, detail}``; ``route`` is False when the service has no
        such route (404/405), and ``ok`` False for any other non-2xx, a connection failure or a
        body whose ``status`` is neither ``healthy`` nor ``ok``."""
        import httpx

        url = self.health_url
        try:
            async with httpx.AsyncClient(
                timeout=self.spec.timeout_s, headers=self._headers(), verify=_ssl_context()
            ) as client:
                r = await client.get(url)
        except httpx.HTTPError as e:
            return {"ok": False, "route": True, "detail": f"GET {url}: {type(e).__name__}: {e}"}
        if r.status_code in (404, 405):
            return {"ok": True, "route": False, "detail": f"no health route at {url}"}
        if not r.is_success:
            detail = f"GET {url} answered HTTP {r.status_code}: {r.text[:200].strip()}"
            return {"ok": False, "route": True, "detail": detail}
        try:
            body = r.json()
        except ValueError:
            body = None
        status = body.get("status") if isinstance(body, dict) else None
        if status is not None and str(status).lower() not in ("healthy", "ok"):
            msg = body.get("message") or body.get("detail") or ""
            detail = f"GET {url} reports status {status!r}: {msg}".rstrip(": ")
            return {"ok": False, "route": True, "detail": detail}
        detail = f"{url}: {status or 'HTTP ' + str(r.status_code)}"
        return {"ok": True, "route": True, "detail": detail}

    def health(self) -> dict[str, Any]:
        """``ahealth`` from synchronous code (the training preflight)."""
        return run_sync(self.ahealth())

    async def ping(self) -> dict[str, Any]:
        """The health route when the service has one, then one real query:
        ``{ok, latency_s, detail}`` (``ok`` False when either failed or the query got no page)."""
        t0 = time.perf_counter()
        health = await self.ahealth()
        if not health["ok"]:
            latency = round(time.perf_counter() - t0, 3)
            return {"ok": False, "latency_s": latency, "detail": health["detail"]}
        (out,) = await self.asearch_batch([("ping", None)], self.top_k or 5)
        latency = round(time.perf_counter() - t0, 3)
        if isinstance(out, SearchError):
            return {"ok": False, "latency_s": latency, "detail": f"{self.url}: {out}"}
        if not out:  # a retriever over a loaded index always ranks some page
            detail = (
                f"{self.url} answered no page for the query 'ping': is its index empty? (every "
                "search of a run would come back empty)"
            )
            return {"ok": False, "latency_s": latency, "detail": detail}
        return {
            "ok": True,
            "latency_s": latency,
            "detail": f"{self.protocol} search at {self.url}: {len(out)} result(s) for 'ping'; "
            f"{health['detail']}",
        }

    # ------------------------------------------------------------------ internals
    def _ask(self, query: str, doc: str | None) -> tuple[str, str | None]:
        """What is sent for ``(query, doc)``: the document goes on the wire only with
        ``ddai-batch`` (``"-1"`` for none); the other protocols restrict after the answer."""
        if self.protocol != "ddai-batch":
            return (query, None)
        return (query, NO_DOC if doc is None else str(doc))

    def _key(self, unit: tuple[str, str | None], keep: int) -> str:
        query, sent_doc = unit
        extra = {"doc": sent_doc} if self.protocol == "ddai-batch" else {}
        return cache_key(
            kind=self.kind, url=self.url, protocol=self.protocol, top_k=keep, query=query, **extra
        )

    def _headers(self) -> dict[str, str]:
        key = self.spec.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _job(self, client: Any, chunk: list[tuple[str, str | None]], keep: int) -> Job:
        queries = [q for q, _ in chunk]

        async def call() -> Outcome:
            if self.protocol == "ddai":
                r = await client.get(self.url, params=[("queries", q) for q in queries])
                r.raise_for_status()
                hits = parse_ddai(r.json(), len(chunk))
            elif self.protocol == "ddai-batch":
                payload = [
                    {"query": q, "id": doc, "request_idx": i} for i, (q, doc) in enumerate(chunk)
                ]
                r = await client.post(self.url, json=payload)
                r.raise_for_status()
                hits = parse_ddai_batch(r.json(), range(len(chunk)))
            else:
                payload = {"queries": queries, "topk": keep, "return_scores": True}
                r = await client.post(self.url, json=payload)
                r.raise_for_status()
                hits = parse_search_r1(r.json(), len(chunk))
            return Outcome([[list(h) for h in hs] for hs in hits])

        return Job(key=cache_key(chunk=chunk, keep=keep), call=call)

    @staticmethod
    def _restrict(
        out: Hits | SearchError, sent_doc: str | None, doc: str | None, keep: int
    ) -> Hits | SearchError:
        """Hits of ``doc`` only: checked when the service was asked to restrict (``sent_doc``,
        ``ddai-batch``: a page of another document is an ``off-document`` error), filtered here
        otherwise (the other protocols cannot restrict)."""
        if isinstance(out, SearchError):
            return out
        if sent_doc is not None and sent_doc != NO_DOC:
            stray = [p for p, _ in out if not p.startswith(f"{sent_doc}_")]
            if stray:
                return SearchError(
                    "off-document",
                    f"asked for document {sent_doc} (id), the service answered {len(stray)} of "
                    f"{len(out)} page(s) of other documents ({', '.join(stray[:3])}): it must "
                    "restrict the search to `id`",
                )
        elif doc is not None:
            out = [(p, s) for p, s in out if p.startswith(f"{doc}_")]
        return out[:keep]
