"""The call engine with scripted calls (no HTTP): concurrency, retries, timeouts, cache, budget."""

from __future__ import annotations

import asyncio
import random

import pytest

from ddai.pipelines.backends.cache import CallCache
from ddai.pipelines.backends.engine import Engine, EngineSettings, Identity, Job, Outcome
from ddai.pipelines.backends.limits import Budget
from ddai.pipelines.backends.retry import CallError, Failure, RetryPolicy, http_failure
from ddai.pipelines.backends.usage import Ledger, Price, TokenUsage

IDENT = Identity("test", "openai", "m", "judge")


class Script:
    """Per key, the outcomes of successive attempts (an exception or a value); counts calls."""

    def __init__(self, plan: dict[str, list[object]] | None = None, delay: float = 0.0) -> None:
        self.plan = plan or {}
        self.delay = delay
        self.calls: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    def job(self, key: str, estimate: TokenUsage | None = None) -> Job:
        async def call() -> Outcome:
            self.calls[key] = self.calls.get(key, 0) + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.delay)
                steps = self.plan.get(key, [])
                step = (
                    steps[self.calls[key] - 1] if self.calls[key] <= len(steps) else f"answer-{key}"
                )
                if isinstance(step, BaseException):
                    raise step
                return Outcome({"v": step}, TokenUsage(100, 10))
            finally:
                self.in_flight -= 1

        return Job(key=key, call=call, estimate=estimate or TokenUsage(100, 10))


def engine(**kw) -> tuple[Engine, list[float]]:
    """An engine whose sleeps are recorded instead of waited."""
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    settings = kw.pop("settings", EngineSettings(concurrency=4, timeout_s=5.0))
    eng = Engine(
        IDENT, settings, classify=lambda e: None, sleep=fake_sleep, rng=random.Random(0), **kw
    )
    return eng, slept


def test_results_align_with_jobs_and_concurrency_is_bounded():
    script = Script(delay=0.01)
    eng, _ = engine(settings=EngineSettings(concurrency=3, timeout_s=5.0))
    keys = [f"k{i}" for i in range(20)]
    out = asyncio.run(eng.run([script.job(k) for k in keys], call_site="t"))
    assert [o.value["v"] for o in out] == [f"answer-{k}" for k in keys]
    assert script.max_in_flight == 3
    site = eng.ledger.snapshot()["t"]
    assert (site["items"], site["calls"], site["ok"], site["attempts"]) == (20, 20, 20, 20)
    # 20 calls x (100 in + 10 out) tokens
    assert (site["input_tokens"], site["output_tokens"]) == (2000, 200)


def test_retryable_failures_are_retried_with_backoff_and_retry_after():
    busy = CallError(http_failure(429, "slow down", {"retry-after": "7"}))
    script = Script({"a": [busy, busy, "ok"]})
    eng, slept = engine(
        settings=EngineSettings(
            concurrency=1, timeout_s=5.0, retry=RetryPolicy(max_retries=3, base_s=0.5)
        )
    )
    [out] = asyncio.run(eng.run([script.job("a")], call_site="t"))
    assert out.value == {"v": "ok"}
    assert script.calls["a"] == 3
    # Backoff alone would be at most 0.5 and 1.0 s; retry-after 7 s wins both times.
    assert slept == [7.0, 7.0]
    site = eng.ledger.snapshot()["t"]
    assert (site["attempts"], site["retries"], site["ok"]) == (3, 2, 1)


def test_backoff_grows_exponentially_within_jitter_bounds():
    err = CallError(Failure("http-503", retryable=True))
    script = Script({"a": [err] * 4})
    eng, slept = engine(
        settings=EngineSettings(
            concurrency=1, timeout_s=5.0, retry=RetryPolicy(max_retries=3, base_s=1.0, cap_s=3.0)
        )
    )
    [out] = asyncio.run(eng.run([script.job("a")], call_site="t"))
    assert isinstance(out, Failure) and out.reason == "http-503"
    # Retry n waits uniformly in [d/2, d] with d = min(cap, base * 2^n): d = 1, 2, 3 (capped).
    assert len(slept) == 3
    for wait, d in zip(slept, (1.0, 2.0, 3.0), strict=True):
        assert d / 2 <= wait <= d


def test_non_retryable_failure_is_returned_once_with_its_reason():
    script = Script({"a": [CallError(Failure("malformed-json", "got 'hi'"))]})
    eng, slept = engine()
    [out] = asyncio.run(eng.run([script.job("a")], call_site="t"))
    assert out == Failure("malformed-json", "got 'hi'")
    assert script.calls["a"] == 1 and slept == []
    assert eng.ledger.snapshot()["t"]["failed"] == {"malformed-json": 1}


def test_unknown_exception_becomes_an_error_failure_not_a_crash():
    script = Script({"a": [RuntimeError("boom")]})
    eng, _ = engine()
    [out] = asyncio.run(eng.run([script.job("a")], call_site="t"))
    assert out.reason == "error" and "RuntimeError: boom" in out.detail


def test_a_hung_call_times_out_and_is_retried():
    async def main():
        never = asyncio.Event()

        async def hang() -> Outcome:
            await never.wait()
            raise AssertionError("unreachable")

        eng, _ = engine(
            settings=EngineSettings(
                concurrency=1, timeout_s=0.05, timeout_grace_s=0.0, retry=RetryPolicy(max_retries=1)
            )
        )
        return await eng.run([Job("h", hang)], call_site="t"), eng

    (out,), eng = asyncio.run(main())
    assert out.reason == "timeout" and out.retryable
    assert eng.ledger.snapshot()["t"]["attempts"] == 2


def test_duplicate_keys_in_a_batch_make_one_call():
    script = Script()
    eng, _ = engine()
    out = asyncio.run(eng.run([script.job("a"), script.job("b"), script.job("a")], call_site="t"))
    assert script.calls == {"a": 1, "b": 1}
    assert out[0] is out[2]
    site = eng.ledger.snapshot()["t"]
    # The repeat rides on the one call: free, but not a cache hit (dry runs count it apart).
    assert (site["items"], site["calls"], site["cache_hits"], site["deduplicated"]) == (3, 2, 0, 1)


def test_cache_answers_a_rerun_without_calls(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    script = Script({"bad": [CallError(Failure("malformed-json"))]})
    eng, _ = engine(cache=cache)
    keys = ["a", "b", "bad"]
    first = asyncio.run(eng.run([script.job(k) for k in keys], call_site="t"))
    again = asyncio.run(eng.run([script.job(k) for k in keys], call_site="t"))
    # The failure is cached with its reason too: handed back, not paid for again.
    assert script.calls == {"a": 1, "b": 1, "bad": 1}
    assert [o.cached for o in again] == [True, True, True]
    assert isinstance(again[2], Failure) and again[2].reason == "malformed-json"
    assert "--retry-failed" in again[2].message()
    assert again[0].value == first[0].value and again[0].usage == TokenUsage(100, 10)
    site = eng.ledger.snapshot()["t"]
    assert site["cached_failures"] == 1 and site["failed"] == {"malformed-json": 2}
    # Asked to retry failures, the engine calls it once more; the answer replaces the failure.
    retry, _ = engine(cache=cache, retry_failed=True)
    third = asyncio.run(retry.run([script.job(k) for k in keys], call_site="t"))
    assert script.calls == {"a": 1, "b": 1, "bad": 2}
    assert not isinstance(third[2], Failure) and not third[2].cached
    assert cache.get_failures(keys) == {} and cache.get("bad") is not None
    cache.close()


def test_budget_stops_before_the_cap_and_the_rest_fail_with_max_cost():
    # Price: $1 per M input, $10 per M output; each call 100 in + 10 out = 0.0001 + 0.0001 = $0.0002.
    price = Price(1.0, 10.0)
    script = Script()
    eng, _ = engine(
        settings=EngineSettings(concurrency=1, timeout_s=5.0), price=price, budget=Budget(0.0007)
    )
    out = asyncio.run(eng.run([script.job(f"k{i}") for i in range(5)], call_site="t"))
    # $0.0007 admits 3 calls ($0.0006); a 4th would reach $0.0008.
    assert [isinstance(o, Failure) for o in out] == [False, False, False, True, True]
    assert out[3].reason == "max-cost"
    assert len(script.calls) == 3
    assert eng.ledger.snapshot()["t"]["cost_usd"] == pytest.approx(0.0006, abs=1e-12)


def test_cancelled_run_resumes_from_the_cache(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    script = Script(delay=0.01)
    keys = [f"k{i}" for i in range(40)]

    async def cancel_halfway():
        eng, _ = engine(cache=cache, settings=EngineSettings(concurrency=2, timeout_s=5.0))
        task = asyncio.create_task(eng.run([script.job(k) for k in keys], call_site="t"))
        while sum(script.calls.values()) < 20:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_halfway())
    cache.flush()
    done = len(cache.get_many(keys))
    first_calls = sum(script.calls.values())
    assert 18 <= done <= first_calls <= 22
    eng, _ = engine(cache=cache)
    out = asyncio.run(eng.run([script.job(k) for k in keys], call_site="t"))
    assert all(not isinstance(o, Failure) for o in out)
    # The rerun called exactly the keys without a cached answer.
    assert sum(script.calls.values()) - first_calls == len(keys) - done
    cache.close()


def test_ledger_separates_call_sites_and_backends():
    ledger = Ledger()
    script = Script()
    eng_a, _ = engine(ledger=ledger)
    asyncio.run(eng_a.run([script.job("a")], call_site="one"))
    asyncio.run(eng_a.run([script.job("b"), script.job("c")], call_site="two"))
    snap = ledger.snapshot()
    assert snap["one"]["items"] == 1 and snap["two"]["items"] == 2


def test_plan_counts_a_batch_as_run_would_without_calling(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    tags = {"kind": "openai", "model": "m", "role": "judge"}
    cache.put("hit", {"v": 1}, TokenUsage(5, 1), **tags)
    cache.put_failure("bad", "http-400", "no", **tags)
    cache.flush()
    script = Script()
    est = TokenUsage(1_000, 200)
    jobs = [script.job(k, est) for k in ("hit", "hit", "bad", "new", "new", "other")]
    eng, _ = engine(cache=cache, price=Price(1.0, 10.0))
    plan = eng.plan(jobs)
    # 6 items: 2 cached (the hit twice), 1 cached failure, 1 repeat of "new", 2 distinct calls
    assert plan == {
        "items": 6,
        "cached": 2,
        "cached_failures": 1,
        "duplicates": 1,
        "to_call": 2,
        "est_input_tokens": 2_000,
        "est_output_tokens": 400,
        "est_cost_usd": round((2_000 * 1.0 + 400 * 10.0) / 1e6, 6),  # 0.006
    }
    assert script.calls == {}  # a dry run calls nothing
    # retrying failures asks the failed request again
    retry, _ = engine(cache=cache, price=Price(1.0, 10.0), retry_failed=True)
    assert (retry.plan(jobs)["cached_failures"], retry.plan(jobs)["to_call"]) == (0, 3)
    cache.close()


class FullDisk:
    """A SQLite connection on a disk that filled up: every write fails as SQLite says it."""

    def __init__(self, db) -> None:
        self.db = db

    def execute(self, sql, *args):
        if sql.lstrip().upper().startswith(("INSERT", "DELETE")):
            import sqlite3

            e = sqlite3.OperationalError("database or disk is full")
            e.sqlite_errorname = "SQLITE_FULL"
            raise e
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def full_disk_cache(path, monkeypatch) -> CallCache:
    """A cache that opens, then cannot write (its writer thread's connection is on a full disk)."""
    from ddai.pipelines.backends import cache as cache_mod

    c = CallCache(path)
    real = cache_mod._connect
    monkeypatch.setattr(cache_mod, "_connect", lambda p: FullDisk(real(p)))
    return c


def test_a_cache_that_fills_up_mid_run_stops_it_with_one_clear_error(tmp_path, monkeypatch):
    from ddai.pipelines.backends.cache import CacheError

    cache = full_disk_cache(tmp_path / "c.sqlite", monkeypatch)
    script = Script(delay=0.01)
    eng, _ = engine(cache=cache, settings=EngineSettings(concurrency=2, timeout_s=5.0))
    with pytest.raises(CacheError) as e:  # one error, not a group of the workers' tracebacks
        asyncio.run(eng.run([script.job(f"k{i}") for i in range(8)], call_site="t"))
    msg = str(e.value)
    assert str(tmp_path / "c.sqlite") in msg and "disk is full" in msg and "free space" in msg
