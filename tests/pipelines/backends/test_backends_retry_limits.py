"""Retry classification and timing, rate limits and the spending cap (hand-computed values)."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time

import pytest

from ddai.pipelines.backends.limits import Budget, TokenBucket
from ddai.pipelines.backends.retry import Failure, RetryPolicy, http_failure, parse_retry_after


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (503, True),
        (400, False),
        (401, False),
        (404, False),
    ],
)
def test_retryable_statuses(status, retryable):
    assert http_failure(status).retryable is retryable
    assert http_failure(status).reason == f"http-{status}"


def test_retry_after_forms():
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after({"retry-after": when}) <= 31


def test_delay_honours_retry_after_up_to_its_cap():
    policy = RetryPolicy(base_s=0.5, cap_s=30, max_retry_after_s=60)
    rng = random.Random(1)
    assert policy.delay(0, Failure("http-429", retry_after=5.0), rng) == 5.0
    assert policy.delay(0, Failure("http-429", retry_after=600.0), rng) == 60.0
    # attempt 3: d = 0.5 * 2^3 = 4 → uniform in [2, 4]
    assert 2.0 <= policy.delay(3, Failure("http-503"), rng) <= 4.0


def test_token_bucket_waits_for_the_refill():
    now = [0.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    async def main():
        bucket = TokenBucket(60, clock=lambda: now[0], sleep=sleep)  # 1 per second, burst 60
        for _ in range(60):
            await bucket.acquire()
        assert slept == []
        await bucket.acquire()  # empty: waits 1 s for one unit
        await bucket.acquire(3)  # waits 3 s more
        bucket.debit(2)  # 2 units used beyond an estimate: the next one waits 3 s (2 owed + 1)
        await bucket.acquire()

    asyncio.run(main())
    assert slept == pytest.approx([1.0, 3.0, 3.0])


def test_budget_reserve_and_settle():
    b = Budget(1.0)
    assert b.reserve(0.6)
    assert not b.reserve(0.5)  # 0.6 in flight + 0.5 > 1.0
    b.settle(0.6, 0.2)  # the call cost less than estimated
    assert (b.spent, b.reserved) == (0.2, 0.0)
    assert b.reserve(0.8) and not b.reserve(0.01)
