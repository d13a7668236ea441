"""Two processes on one call cache pay for a key once: the cross-process claims of calls in flight.

The processes are forked children running the real engine on one SQLite cache with a scripted call
that logs each paid call (one line per call, appended: the server's own counter) and sleeps."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from collections import Counter
from pathlib import Path

from ddai.pipelines.backends.cache import CallCache
from ddai.pipelines.backends.claims import Claims
from ddai.pipelines.backends.engine import Engine, EngineSettings, Identity, Job, Outcome
from ddai.pipelines.backends.usage import TokenUsage

IDENT = Identity("test", "openai", "m", "judge")
KEYS = [f"k{i}" for i in range(30)]
_FORK = multiprocessing.get_context("fork")


def _job(key: str, log: Path, delay: float) -> Job:
    async def call() -> Outcome:
        with open(log, "a") as fh:  # one short append per call: lines never interleave
            fh.write(f"{os.getpid()} {key}\n")
        await asyncio.sleep(delay)
        return Outcome({"v": f"answer-{key}"}, TokenUsage(100, 10))

    return Job(key=key, call=call)


def _child(cache_path: Path, log: Path, delay: float, start, results) -> None:
    start.wait()
    cache = CallCache(cache_path)
    eng = Engine(
        IDENT, EngineSettings(concurrency=4, timeout_s=3600.0), classify=lambda e: None, cache=cache
    )
    out = asyncio.run(eng.run([_job(k, log, delay) for k in KEYS], call_site="t"))
    cache.close()
    results.put((os.getpid(), [o.value["v"] for o in out], eng.ledger.snapshot()["t"]))


def _calls(log: Path) -> list[tuple[int, str]]:
    if not log.exists():
        return []
    return [
        (int(pid), key)
        for pid, key in (line.split() for line in log.read_text().split("\n") if line)
    ]


def _wait_for(predicate, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def test_two_processes_started_together_pay_for_each_key_once(tmp_path):
    cache, log = tmp_path / "c.sqlite", tmp_path / "calls.log"
    start, results = _FORK.Event(), _FORK.Queue()
    procs = [
        _FORK.Process(target=_child, args=(cache, log, 0.05, start, results)) for _ in range(2)
    ]
    for p in procs:
        p.start()
    start.set()
    got = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    paid = Counter(key for _, key in _calls(log))
    assert paid == Counter(KEYS)  # 30 calls in all, where each process alone pays 30
    for _, values, site in got:
        assert values == [f"answer-{k}" for k in KEYS]
        assert site["items"] == site["cache_hits"] + site["calls"] + site["concurrent_answers"]
        assert site["attempts"] == site["calls"]
    # Each process's paid calls are the log's lines under its pid.
    by_pid = Counter(pid for pid, _ in _calls(log))
    assert {pid: site["calls"] for pid, _, site in got} == {
        pid: by_pid.get(pid, 0) for pid, _, _ in got
    }


def test_a_killed_process_lets_the_other_pay_its_claimed_keys_once(tmp_path):
    cache, log = tmp_path / "c.sqlite", tmp_path / "calls.log"
    start, results = _FORK.Event(), _FORK.Queue()
    start.set()
    # The first process claims its first 4 keys (its concurrency) and hangs on their calls.
    hung = _FORK.Process(target=_child, args=(cache, log, 3600.0, start, results))
    hung.start()
    try:
        _wait_for(lambda: len(_calls(log)) == 4, "the first process's 4 calls in flight")
        held = {key for _, key in _calls(log)}
        other = _FORK.Process(target=_child, args=(cache, log, 0.01, start, results))
        other.start()
        rest = set(KEYS) - held
        _wait_for(
            lambda: {k for pid, k in _calls(log) if pid == other.pid} >= rest,
            "the second process's calls of the 26 keys nobody holds",
        )
        # It went on with the batch and left the held keys alone while their owner lived.
        assert not {k for pid, k in _calls(log) if pid == other.pid} & held
    finally:
        os.kill(hung.pid, signal.SIGKILL)
        hung.join(timeout=60)
    pid, values, site = results.get(timeout=60)
    other.join(timeout=60)
    assert other.exitcode == 0 and pid == other.pid
    assert values == [f"answer-{k}" for k in KEYS]
    # The killed process's claims died with it: the survivor paid for every key exactly once.
    assert Counter(k for p, k in _calls(log) if p == other.pid) == Counter(KEYS)
    assert (site["calls"], site["concurrent_answers"]) == (30, 0)


def test_claims_conflict_between_opens_and_are_released_after_the_commit(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = CallCache(path)
    rival = Claims(path.with_name(path.name + ".claims"))  # another open: a process's view
    assert cache.claims.try_claim("k") and cache.claims.try_claim("k")  # one open: counted
    assert not rival.try_claim("k")
    cache.claims.release("k")
    assert not rival.try_claim("k")  # one claim of it still held
    cache.put("k", {"v": 1}, TokenUsage(1, 1), kind="openai", model="m", role="judge")
    cache.release_claim("k")
    _wait_for(lambda: rival.try_claim("k"), "the claim let go after the commit")
    # By the time the claim is free, the answer is in the file (read by another connection).
    reader = CallCache(path)
    assert reader.get("k") is not None
    reader.close()
    rival.close()
    cache.close()


def test_one_process_concurrency_and_dedup_are_unchanged_and_claims_all_let_go(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = CallCache(path)
    log = tmp_path / "calls.log"
    eng = Engine(
        IDENT, EngineSettings(concurrency=3, timeout_s=60.0), classify=lambda e: None, cache=cache
    )
    jobs = [_job(k, log, 0.01) for k in KEYS + KEYS[:5]]  # 5 repeats ride on their one call
    out = asyncio.run(eng.run(jobs, call_site="t"))
    assert [o.value["v"] for o in out] == [f"answer-{k}" for k in KEYS + KEYS[:5]]
    site = eng.ledger.snapshot()["t"]
    assert (site["items"], site["calls"], site["deduplicated"], site["concurrent_answers"]) == (
        35,
        30,
        5,
        0,
    )
    assert Counter(k for _, k in _calls(log)) == Counter(KEYS)
    rival = Claims(path.with_name(path.name + ".claims"))
    assert all(rival.try_claim(k) for k in KEYS)  # run returned: every claim was let go
    rival.close()
    cache.close()
