"""Failures of the caller's setup (no key, a rejected key, a request that could not be built) are
never cached: once the setup is fixed, a rerun calls the model instead of handing the old failure
back. A model's own failure (a malformed answer) stays cached."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from contextlib import closing

import pytest
from support.fakes import FakeModelServer

from ddai.pipelines.backends import BackendSpec, JudgeRequest, build, run_sync
from ddai.pipelines.backends.cache import CallCache
from ddai.pipelines.backends.engine import Engine, EngineSettings, Identity, Job, Outcome
from ddai.pipelines.backends.retry import CallError, Failure, http_failure
from ddai.pipelines.backends.usage import TokenUsage


def _failures(path) -> dict[str, str]:
    """The cache file's failures table: key -> reason (every row, read past the cache's API)."""
    with closing(sqlite3.connect(path)) as db:
        return dict(db.execute("SELECT key, reason FROM failures"))


def test_a_keyless_call_is_not_cached_and_a_rerun_with_the_key_calls(
    srv: FakeModelServer, tmp_path, monkeypatch
):
    """The real SDK, no ``base_url``: without ``$OPENAI_API_KEY`` every call fails ``no-key``;
    after the key is set (and the SDK's default URL pointed at the fake server) the same call,
    same cache key, reaches the model."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    cache = tmp_path / "calls.sqlite"
    spec = BackendSpec(name="real", kind="openai", model="fake-judge", max_retries=0)
    req = JudgeRequest("How many?", "1,000", "1000")

    [r] = run_sync(build(spec, "judge", cache=cache).judge([req]))
    assert r.score is None and r.error.startswith("no-key")
    assert _failures(cache) == {}  # nothing cached: no key is the caller's setup
    assert srv.requests == 0

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
    judge = build(spec, "judge", cache=cache)
    [r] = run_sync(judge.judge([req]))
    assert r.error is None and r.score == 1.0
    assert srv.requests == 1
    usage = judge.usage()["judge"]
    assert (usage["calls"], usage["ok"], usage["cached_failures"]) == (1, 1, 0)


IDENT = Identity("test", "openai", "m", "judge")


def _engine(cache: CallCache, **kw) -> Engine:
    async def no_sleep(_s: float) -> None:
        return None

    return Engine(
        IDENT,
        EngineSettings(concurrency=2, timeout_s=5.0),
        classify=lambda e: None,
        cache=cache,
        sleep=no_sleep,
        rng=random.Random(0),
        **kw,
    )


def _job(key: str, exc: BaseException | None, calls: list[str]) -> Job:
    async def call() -> Outcome:
        calls.append(key)
        if exc is not None:
            raise exc
        return Outcome({"v": key}, TokenUsage(1, 1))

    return Job(key=key, call=call)


@pytest.mark.parametrize(
    ("failure", "cached"),
    [
        (Failure("no-key", "set $X"), False),
        (Failure("bad-input", "no such image"), False),
        (http_failure(401, "invalid api key"), False),
        (http_failure(403, "permission denied"), False),
        (Failure("malformed-json", "not JSON"), True),  # the model's answer: cached
        (http_failure(400, "bad request"), True),
    ],
)
def test_setup_failures_are_not_cached_model_failures_are(tmp_path, failure, cached):
    path = tmp_path / "c.sqlite"
    calls: list[str] = []
    with CallCache(path) as cache:
        [out] = asyncio.run(
            _engine(cache).run([_job("k", CallError(failure), calls)], call_site="t")
        )
        assert isinstance(out, Failure) and out.reason == failure.reason
    assert _failures(path) == ({"k": failure.reason} if cached else {})
    # the rerun: a setup failure calls again (and answers), a model failure comes from the cache
    with CallCache(path) as cache:
        eng = _engine(cache)
        [out] = asyncio.run(eng.run([_job("k", None, calls)], call_site="t"))
    assert calls == (["k"] if cached else ["k", "k"])
    assert isinstance(out, Failure) == cached


def test_a_setup_failure_cached_by_an_older_version_is_called_again(tmp_path):
    """A cache holding ``no-key`` failures from before this rule: they are neither handed back
    nor counted as cached failures by a dry run; the call is made."""
    path = tmp_path / "c.sqlite"
    tags = {"kind": "openai", "model": "m", "role": "judge"}
    with CallCache(path) as cache:
        cache.put_failure("k", "no-key", "set $X", **tags)
        cache.put_failure("m", "malformed-json", "not JSON", **tags)
    calls: list[str] = []
    with CallCache(path) as cache:
        eng = _engine(cache)
        jobs = [_job("k", None, calls), _job("m", None, calls)]
        plan = eng.plan(jobs)
        assert (plan["cached_failures"], plan["to_call"]) == (1, 1)
        out = asyncio.run(eng.run(jobs, call_site="t"))
    assert calls == ["k"]
    assert out[0] == Outcome({"v": "k"}, TokenUsage(1, 1)) and out[1].reason == "malformed-json"
