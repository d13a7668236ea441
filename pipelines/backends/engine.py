"""The call engine: every remote call goes through ``Engine.run``.

For a batch of jobs it answers what it can from the cache, sends the rest with at most
``concurrency`` in flight (shared by every batch on the same engine), under optional rpm/tpm limits
and a spending cap, with a per-attempt timeout and retries with backoff; each answer is cached the
moment it arrives. Failures come back as ``Failure`` values in the job's slot, never as a made-up
score, and everything is accounted in the ledger under the caller's call site.

A call that fails for good is cached with its reason (never a spending-cap stop, which is no call,
nor a failure of the caller's setup, ``retry.SETUP_FAILURES``: no key, a rejected key, a request
that could not be built): a rerun hands the same failure back without paying again, marked
``cached``, unless the engine was built with ``retry_failed`` (``--retry-failed``), which sends
those calls once more.

A batch runs on ``min(concurrency, misses)`` worker coroutines pulling from one iterator, so memory
stays proportional to the concurrency, not to the batch.

Two processes on one cache pay for a key once: a worker claims the key across processes before
paying (``CallCache.claims``), looks in the cache again once it holds the claim, and lets the claim
go only after what the call left is committed. A key another process holds is put aside while the
rest of the batch goes on; once the batch is through, the workers wait for those, polling the cache
with a growing pause, and hand back the other process's answer (``concurrent_answers``, not paid)
or, when its claim is let go without one (it failed for its own reasons, or was killed: the kernel
drops a dead process's claims), claim the key and pay.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddai.pipelines.backends.cache import CacheError, CallCache
from ddai.pipelines.backends.claims import HELD, claim_or_answer
from ddai.pipelines.backends.limits import Budget, TokenBucket
from ddai.pipelines.backends.progress import Bar
from ddai.pipelines.backends.retry import SETUP_FAILURES, CallError, Failure, RetryPolicy
from ddai.pipelines.backends.usage import FREE, Ledger, Price, SiteUsage, TokenUsage

if TYPE_CHECKING:
    from ddai.pipelines.backends.config import BackendSpec

_DETAIL_MAX = 300


@dataclass(frozen=True)
class Outcome:
    """A call's answer: the JSON-able ``value`` as cached, its token usage, and whether it came
    from the cache (then it cost nothing this time)."""

    value: Any
    usage: TokenUsage = field(default_factory=TokenUsage)
    cached: bool = False


@dataclass(frozen=True)
class Job:
    """One request: its cache key, one attempt at the call, and its estimated tokens."""

    key: str
    call: Callable[[], Awaitable[Outcome]]
    estimate: TokenUsage = field(default_factory=TokenUsage)


@dataclass(frozen=True)
class EngineSettings:
    concurrency: int = 8
    timeout_s: float = 60.0
    rpm: float | None = None
    tpm: float | None = None
    # The engine's own timeout backs up the SDK's (set to ``timeout_s``): it fires this much later,
    # so the SDK reports its own timeout first, and a hang the SDK misses is still cut.
    timeout_grace_s: float = 1.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def of(cls, spec: BackendSpec, **limits: Any) -> EngineSettings:
        """A backend's concurrency, timeout and retries (options ``backoff_base_s``,
        ``backoff_cap_s``); ``limits``: ``rpm``/``tpm`` where the kind honours them."""
        retry = RetryPolicy(
            max_retries=spec.max_retries,
            base_s=float(spec.options.get("backoff_base_s", 0.5)),
            cap_s=float(spec.options.get("backoff_cap_s", 30.0)),
        )
        return cls(concurrency=spec.concurrency, timeout_s=spec.timeout_s, retry=retry, **limits)


@dataclass(frozen=True)
class Identity:
    """What the cache and the ledger know the engine by."""

    name: str
    kind: str
    model: str | None
    role: str
    endpoint: str | None = None
    """The endpoint for people (``BackendSpec.endpoint_label``), recorded with cached answers."""


Classifier = Callable[[BaseException], Failure | None]


def classify_common(exc: BaseException) -> Failure | None:
    """Failures every backend shares: our own typed errors and timeouts."""
    if isinstance(exc, CallError):
        return exc.failure
    if isinstance(exc, TimeoutError):
        return Failure("timeout", "no answer within the per-call timeout", retryable=True)
    return None


class Engine:
    def __init__(
        self,
        identity: Identity,
        settings: EngineSettings,
        *,
        classify: Classifier,
        cache: CallCache | None = None,
        ledger: Ledger | None = None,
        price: Price | None = FREE,
        budget: Budget | None = None,
        progress: bool | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        retry_failed: bool = False,
    ) -> None:
        self.identity = identity
        self.settings = settings
        self.cache = cache
        self.ledger = ledger if ledger is not None else Ledger()
        # None: a remote backend with no price; its calls' cost is unknown (null), never $0.
        self.price = price
        self.budget = budget
        self.progress = progress
        self._classify = classify
        self.retry_failed = retry_failed
        self._sleep = sleep
        self._rng = rng or random.Random()
        # Built lazily: asyncio primitives bind to the loop they are first used on.
        self._sem: asyncio.Semaphore | None = None
        self._rpm: TokenBucket | None = None
        self._tpm: TokenBucket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ public
    async def run(self, jobs: Sequence[Job], *, call_site: str) -> list[Outcome | Failure]:
        """Answer every job; the result list is aligned with ``jobs``."""
        self._bind_loop()
        site = self.ledger.site(call_site, self.identity.name, self.identity.model)
        results: list[Outcome | Failure | None] = [None] * len(jobs)
        hits = self.cache.get_many(j.key for j in jobs) if self.cache is not None else {}
        pending: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            hit = hits.get(job.key)
            if hit is not None:
                results[i] = Outcome(hit.value, hit.usage, cached=True)
            else:
                pending.setdefault(job.key, []).append(i)
        n_hits = sum(1 for r in results if r is not None)  # true cache hits, repeats included
        if self.cache is not None and pending and not self.retry_failed:
            for key, (reason, detail) in self._cached_failures(pending).items():
                failure = Failure(reason, detail, cached=True)
                for i in pending.pop(key):
                    results[i] = failure
                    site.failed[reason] += 1
                    site.cached_failures += 1
        n_old = sum(1 for r in results if r is not None) - n_hits  # answered by a cached failure
        site.items += len(jobs)
        site.cache_hits += n_hits
        site.deduplicated += sum(len(idxs) - 1 for idxs in pending.values())
        with Bar(f"{call_site} · {self.identity.name}", len(jobs), enabled=self.progress) as bar:
            bar.advance(n_hits, hits=n_hits)
            if n_old:
                bar.advance(n_old, failed=n_old)
            work = iter(pending.items())
            held: deque[tuple[str, list[int]]] = deque()  # keys another process has in flight

            async def answer(key: str, idxs: list[int], *, wait: bool) -> bool:
                """Fill ``idxs`` with the key's answer; False (nothing done) when another process
                holds the key and ``wait`` is off."""
                job = jobs[idxs[0]]
                if self.cache is None:
                    out = await self._call(job, site)
                    concurrent = False
                else:
                    found = await claim_or_answer(
                        self.cache.claims, key, self._answered, wait=wait, rng=self._rng
                    )
                    if found is HELD:
                        return False
                    concurrent = found is not None
                    if concurrent:
                        out = found
                        site.concurrent_answers += 1
                        if isinstance(out, Failure):
                            site.failed[out.reason] += 1
                    else:
                        try:
                            out = await self._call(job, site)
                        finally:  # after the answer's commit: a waiting process finds it
                            self.cache.release_claim(key)
                for i in idxs:
                    results[i] = out
                # Repeats of a key inside the batch ride on its one call, like cache hits.
                hits = len(idxs) if concurrent and isinstance(out, Outcome) else len(idxs) - 1
                bar.advance(len(idxs), hits=hits, failed=isinstance(out, Failure))
                return True

            async def worker() -> None:
                # One shared iterator: ``next`` never awaits, so workers never take the same item.
                for key, idxs in work:
                    if not await answer(key, idxs, wait=False):
                        held.append((key, idxs))
                # Whoever put a key aside is still here to take it: none is left behind.
                while held:
                    key, idxs = held.popleft()
                    await answer(key, idxs, wait=True)

            try:
                async with asyncio.TaskGroup() as tg:
                    for _ in range(min(self.settings.concurrency, len(pending))):
                        tg.create_task(worker())
            except* CacheError as group:  # the cache stopped taking answers: one error, not N
                raise group.exceptions[0] from None
        if self.cache is not None and pending:
            # Durable when ``run`` returns: the writer thread has committed every answer.
            await asyncio.to_thread(self.cache.flush)
        return results  # type: ignore[return-value]  # every slot is filled above

    def plan(self, jobs: Sequence[Job]) -> dict[str, Any]:
        """A dry run of ``run``: what the batch would pay for, counted the way ``run`` counts.

        ``items == cached + cached_failures + duplicates + to_call``: ``cached`` items the cache
        answers now, ``cached_failures`` items whose request failed for good before (handed back,
        not asked again, unless retrying failures), ``duplicates`` repeats of a request in the same
        batch (they ride on its one call), ``to_call`` the distinct requests to send (first
        attempts; retries come on top), and the estimated tokens and cost of those alone."""
        hits = self.cache.get_many(j.key for j in jobs) if self.cache is not None else {}
        todo = {j.key: j.estimate for j in jobs if j.key not in hits}
        failed: set[str] = set()
        if self.cache is not None and todo and not self.retry_failed:
            failed = set(self._cached_failures(todo))
            todo = {k: v for k, v in todo.items() if k not in failed}
        est = sum(todo.values(), TokenUsage())
        cached = sum(1 for j in jobs if j.key in hits)
        n_failed = sum(1 for j in jobs if j.key in failed)
        return {
            "items": len(jobs),
            "cached": cached,
            "cached_failures": n_failed,
            "duplicates": len(jobs) - cached - n_failed - len(todo),
            "to_call": len(todo),
            "est_input_tokens": est.input_tokens,
            "est_output_tokens": est.output_tokens,
            "est_cost_usd": None if self.price is None else round(self.price.cost(est), 6),
        }

    # ------------------------------------------------------------------ claims
    def _answered(self, key: str) -> Outcome | Failure | None:
        """The cache's answer for ``key`` (a cached failure unless retrying them), as ``run`` hands
        it back; None when it has none."""
        assert self.cache is not None
        hit = self.cache.get(key)
        if hit is not None:
            return Outcome(hit.value, hit.usage, cached=True)
        if not self.retry_failed:
            for reason, detail in self._cached_failures([key]).values():
                return Failure(reason, detail, cached=True)
        return None

    # ------------------------------------------------------------------ one job
    async def _call(self, job: Job, site: SiteUsage) -> Outcome | Failure:
        assert self._sem is not None
        est_cost = self.price.cost(job.estimate) if self.price is not None else 0.0
        attempt = 0
        while True:
            if self.budget is not None and not self.budget.reserve(est_cost):
                failure = Failure(
                    "max-cost",
                    f"the ${self.budget.max_cost:g} cap would be exceeded; rerun to resume",
                )
                site.failed[failure.reason] += 1
                return failure
            used = TokenUsage()
            async with self._sem:
                if self._rpm is not None:
                    await self._rpm.acquire(1)
                if self._tpm is not None:
                    await self._tpm.acquire(job.estimate.input_tokens + job.estimate.output_tokens)
                site.attempts += 1
                site.calls += attempt == 0
                try:
                    async with asyncio.timeout(
                        self.settings.timeout_s + self.settings.timeout_grace_s
                    ):
                        out = await job.call()
                except asyncio.CancelledError:
                    self._settle(est_cost, TokenUsage(), site)
                    raise
                except Exception as e:
                    failure = self.failure_of(e)
                    if isinstance(e, CallError) and e.usage is not None:
                        used = e.usage
                else:
                    failure = None
                    used = out.usage
            self._settle(est_cost, used, site, estimate=job.estimate)
            if failure is None:
                if self.cache is not None:
                    self.cache.put(job.key, out.value, out.usage, **self._cache_tags())
                site.ok += 1
                return out
            if failure.retryable and attempt < self.settings.retry.max_retries:
                site.retries += 1
                await self._sleep(self.settings.retry.delay(attempt, failure, self._rng))
                attempt += 1
                continue
            site.failed[failure.reason] += 1
            if self.cache is not None and failure.reason not in SETUP_FAILURES:
                self.cache.put_failure(
                    job.key, failure.reason, failure.detail, **self._cache_tags()
                )
            return failure

    def _cached_failures(self, keys: Any) -> dict[str, tuple[str, str]]:
        """The cache's failures among ``keys`` (key → reason, detail), less those of the caller's
        setup an older version cached: they are called again."""
        assert self.cache is not None
        found = self.cache.get_failures(keys)
        return {k: v for k, v in found.items() if v[0] not in SETUP_FAILURES}

    def _cache_tags(self) -> dict[str, Any]:
        """What a cached answer or failure records of the backend that made it."""
        ident = self.identity
        return {
            "kind": ident.kind,
            "model": ident.model,
            "role": ident.role,
            "endpoint": ident.endpoint,
        }

    def _settle(
        self,
        est_cost: float,
        used: TokenUsage,
        site: SiteUsage,
        *,
        estimate: TokenUsage | None = None,
    ) -> None:
        cost = self.price.cost(used) if self.price is not None else 0.0
        site.input_tokens += used.input_tokens
        site.output_tokens += used.output_tokens
        if self.price is None:
            site.cost_usd = None  # an attempt was paid for at an unknown price
        elif site.cost_usd is not None:
            site.cost_usd += cost
        if self.budget is not None:
            self.budget.settle(est_cost, cost)
        if self._tpm is not None and estimate is not None:
            extra = (used.input_tokens + used.output_tokens) - (
                estimate.input_tokens + estimate.output_tokens
            )
            if extra > 0:
                self._tpm.debit(extra)

    def failure_of(self, exc: BaseException) -> Failure:
        """The ``Failure`` an exception stands for (typed, timeout, the SDK's, else ``error``)."""
        failure = classify_common(exc) or self._classify(exc)
        if failure is None:
            failure = Failure("error", f"{type(exc).__name__}: {exc}")
        if len(failure.detail) > _DETAIL_MAX:
            failure = Failure(
                failure.reason,
                failure.detail[:_DETAIL_MAX] + "…",
                failure.retryable,
                failure.retry_after,
            )
        return failure

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        # A new event loop (e.g. successive ``run_sync`` calls): rebuild the loop-bound primitives.
        self._loop = loop
        self._sem = asyncio.Semaphore(self.settings.concurrency)
        self._rpm = TokenBucket(self.settings.rpm, sleep=self._sleep) if self.settings.rpm else None
        self._tpm = TokenBucket(self.settings.tpm, sleep=self._sleep) if self.settings.tpm else None
