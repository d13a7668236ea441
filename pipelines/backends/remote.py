"""What the remote model backends share: the engine, the SDK client, ping and the dry run
(``ModelBackend``), and for the prompted roles the prompts, cache keys and role methods
(``RemoteBackend``, which the OpenAI and Gemini backends build on).

A prompted backend supplies ``_complete`` (one attempt: send a rendered prompt and images, return
the answer's JSON value and token usage, raise on failure), ``_classify`` (map its SDK's
exceptions to ``Failure``), ``_new_client``/``_close_client`` and ``_ping``. Everything else
(concurrency, retries, cache, cost, progress, the role methods, the dry run) lives here, once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ddai.pipelines.backends import context as ctx_mod
from ddai.pipelines.backends import media, prompts
from ddai.pipelines.backends.base import (
    GenerateRequest,
    GenerateResult,
    JudgeRequest,
    JudgeResult,
    RewriteRequest,
    RewriteResult,
    VerifyRequest,
    VerifyResult,
    VetRequest,
    VetResult,
    VQARequest,
    VQAResult,
)
from ddai.pipelines.backends.cache import cache_key
from ddai.pipelines.backends.config import BackendSpec, ConfigError
from ddai.pipelines.backends.engine import (
    Classifier,
    Engine,
    EngineSettings,
    Identity,
    Job,
    Outcome,
)
from ddai.pipelines.backends.limits import Budget
from ddai.pipelines.backends.retry import CallError, Failure
from ddai.pipelines.backends.tasks import TASKS, Task
from ddai.pipelines.backends.usage import Price, TokenUsage

# Rough prompt-size estimate for limits and dry runs: ~4 characters per token, a flat
# allowance per image (a 512-px tile's worth).
CHARS_PER_TOKEN = 4
TOKENS_PER_IMAGE = 258
# A local server needs no key, but the SDKs insist on one; this placeholder is never a secret.
_NO_KEY = "no-key"


def model_engine(
    spec: BackendSpec,
    role: str,
    context: ctx_mod.Context,
    classify: Classifier,
    price: Price | None,
) -> Engine:
    """The call engine of a model backend (SDK-served roles and embedders): the spec's
    concurrency, timeouts, rate limits and retries, the run's cache, ledger, budget and progress."""
    return Engine(
        Identity(spec.name, spec.kind, spec.model, role, spec.endpoint_label()),
        EngineSettings.of(spec, rpm=spec.rpm, tpm=spec.tpm),
        classify=classify,
        cache=context.cache if spec.cache else None,
        ledger=context.ledger,
        price=price,
        budget=Budget(context.max_cost) if context.max_cost is not None else None,
        progress=context.progress,
        retry_failed=context.retry_failed,
    )


class ModelBackend(ctx_mod.Backend):
    """A backend served by a remote model through the call engine; one instance serves one role.

    A subclass builds each request's ``Job`` (``_job``) and supplies its SDK's client, error
    mapping and metadata call."""

    def __init__(self, spec: BackendSpec, role: str, context: ctx_mod.Context) -> None:
        super().__init__(spec, role, context)
        self.price = spec.price()  # None: not priced (the usage's cost is null, not $0)
        self.engine = model_engine(spec, role, context, self._classify, self.price)
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> Any:
        """The SDK client for the running event loop (its connection pool is bound to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            key = self.spec.api_key()
            if key is None and not self.spec.base_url:
                var = self.spec.key_env()
                raise CallError(
                    Failure("no-key", f"set ${var} (backend {self.name!r} reads its key from it)")
                )
            self._client = self._new_client(key or _NO_KEY)
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._close_client(self._client)
        self._client = None

    def plan(self, reqs: Sequence[Any]) -> dict[str, Any]:
        """A dry run: exactly what the run would pay for, counted the way the engine counts
        (``Engine.plan``: cached, cached failures, repeats in the batch, the distinct calls to
        make and their estimated tokens and cost). Unpriced (``spec.price()`` None): the cost is
        None with a ``cost_note`` naming the price fields, not a $0 that reads as free."""
        jobs = [self._job_or_failure(r) for r in self._requests(reqs)]
        plan = {"backend": self.name, "model": self.spec.model, **self.engine.plan(jobs)}
        if self.price is None:
            plan.update(est_cost_usd=None, cost_note=self.spec.price_note())
        return plan

    async def ping(self) -> dict[str, Any]:
        """A cheap reachability check (model metadata, no tokens): ``{ok, latency_s, detail}``."""
        t0 = time.perf_counter()
        try:
            detail = await asyncio.wait_for(self._ping(), timeout=self.spec.timeout_s)
        except Exception as e:
            failure = self.engine.failure_of(e)
            return {
                "ok": False,
                "latency_s": round(time.perf_counter() - t0, 3),
                "detail": failure.message(),
            }
        return {"ok": True, "latency_s": round(time.perf_counter() - t0, 3), "detail": detail}

    def _job_or_failure(self, req: Any) -> Job:
        """The request's job, or one that fails at once (uncached) when the request cannot be sent
        (a missing or unreadable image file, a template variable the request lacks)."""
        try:
            return self._job(req)
        except (OSError, ValueError) as e:
            failure = Failure("bad-input", str(e)[:200])

            async def fail() -> Outcome:
                raise CallError(failure)

            return Job(key=cache_key(bad_input=repr(req), detail=failure.detail), call=fail)

    # ------------------------------------------------------------------ for subclasses
    def _requests(self, reqs: Sequence[Any]) -> Sequence[Any]:
        """The requests as ``_job`` takes them."""
        return reqs

    def _job(self, req: Any) -> Job:
        raise NotImplementedError

    def _new_client(self, key: str) -> Any:
        raise NotImplementedError

    async def _close_client(self, client: Any) -> None:
        raise NotImplementedError

    def _classify(self, exc: BaseException) -> Failure | None:
        return None

    async def _ping(self) -> str:
        raise NotImplementedError


class RemoteBackend(ModelBackend):
    """A model backend answering the prompted roles (``tasks.TASKS``)."""

    kind = "remote"

    def __init__(self, spec: BackendSpec, role: str, context: ctx_mod.Context) -> None:
        if role not in TASKS:
            raise ConfigError(f"backend {spec.name!r} ({spec.kind}) cannot serve {role!r}")
        self.task: Task = TASKS[role]
        prompt_file = (spec.options.get("prompts") or {}).get(role) or spec.prompt
        self.prompt = prompts.load(role, prompt_file)
        super().__init__(spec, role, context)

    # ------------------------------------------------------------------ the role methods
    async def judge(self, reqs: Sequence[JudgeRequest]) -> list[JudgeResult]:
        return await self._run("judge", reqs)

    async def generate(self, reqs: Sequence[GenerateRequest]) -> list[GenerateResult]:
        return await self._run("generator", [self._with_page_texts(r) for r in reqs])

    async def rewrite(self, reqs: Sequence[RewriteRequest]) -> list[RewriteResult]:
        return await self._run("rewriter", reqs)

    async def verify(self, reqs: Sequence[VerifyRequest]) -> list[VerifyResult]:
        return await self._run("verifier", reqs)

    async def answer(self, reqs: Sequence[VQARequest]) -> list[VQAResult]:
        return await self._run("vqa", reqs)

    async def vet(self, reqs: Sequence[VetRequest]) -> list[VetResult]:
        return await self._run("vetter", reqs)

    # ------------------------------------------------------------------ internals
    def _expect(self, role: str) -> None:
        if role != self.role:
            raise TypeError(f"backend {self.name!r} was built for --{self.role}, not --{role}")

    async def _run(self, role: str, reqs: Sequence[Any]) -> list[Any]:
        self._expect(role)
        jobs = [self._job_or_failure(r) for r in reqs]
        outs = await self.engine.run(jobs, call_site=self.context.call_site)
        return [
            self.task.fail(o) if isinstance(o, Failure) else self.task.decode(o.value) for o in outs
        ]

    def _requests(self, reqs: Sequence[Any]) -> Sequence[Any]:
        self._expect(self.role)
        return [self._with_page_texts(r) for r in reqs] if self.role == "generator" else reqs

    def _job(self, req: Any) -> Job:
        rendered = self.prompt.render(**self.task.variables(req))
        images = list(self.task.images(req))
        media.interleave(rendered.user, images)  # more image slots than images: bad input, now
        key = cache_key(
            kind=self.spec.kind,
            model=self.spec.model,
            endpoint=self.spec.endpoint(),
            role=self.role,
            prompt=self.prompt.sha256,
            params=self._params(),
            system=rendered.system,
            user=rendered.user,
            images=[media.fingerprint(i) for i in images],
        )
        est_in = (
            len(rendered.system) + len(rendered.user)
        ) // CHARS_PER_TOKEN + TOKENS_PER_IMAGE * len(images)
        est_out = self.spec.max_tokens or self.task.est_output_tokens(req)

        async def call() -> Outcome:
            value, usage = await self._complete(rendered, images, self.task.schema)
            try:
                self.task.check(value, req)
            except CallError as e:
                raise CallError(e.failure, usage) from None  # billed even though unusable
            return Outcome(value, usage)

        return Job(key=key, call=call, estimate=TokenUsage(est_in, est_out))

    def _params(self) -> dict[str, Any]:
        """Everything besides the prompt that changes the answer (part of the cache key)."""
        return {
            "temperature": self.spec.temperature,
            "max_tokens": self.spec.max_tokens,
            "extra": self.spec.options.get("params") or {},
            **self._sdk_params(),
        }

    def _with_page_texts(self, req: GenerateRequest) -> GenerateRequest:
        corpus = self.context.corpus
        if req.page_texts is not None or corpus is None:
            return req
        texts = [corpus.text(p) if p in corpus else "" for p in req.pages]
        return GenerateRequest(req.question, tuple(req.pages), tuple(texts), tuple(req.images))

    # ------------------------------------------------------------------ for subclasses
    def _sdk_params(self) -> dict[str, Any]:
        return {}

    async def _complete(
        self, rendered: prompts.Rendered, images: list[str], schema: type[BaseModel] | None
    ) -> tuple[dict[str, Any], TokenUsage]:
        raise NotImplementedError
