"""Failure classification and the retry schedule.

Retryable: HTTP 408, 409, 429 and 5xx, timeouts and dropped connections. Everything else (a 400, an
unparsable answer, a score out of range) fails at once: asking again at temperature 0 would pay
for the same mistake. The wait before retry ``n`` (0-based) is exponential with jitter,
``d = min(cap, base·2ⁿ)`` drawn uniformly from ``[d/2, d]``, and never shorter than the server's
``retry-after``.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ddai.pipelines.backends.usage import TokenUsage

RETRY_STATUSES = frozenset({408, 409, 429})
# Failures of the caller's setup, not of the model's answer: no key (``no-key``), a key the server
# rejects (401, 403), a request that could not be built (``bad-input``: e.g. a missing image
# file). The key and the files are no part of the cache key, so a cached one would be handed back
# after the fix; the engine never caches them (nor serves one an older version cached). A spending
# cap stop (``max-cost``) is no call and is never cached either.
SETUP_FAILURES = frozenset({"no-key", "http-401", "http-403", "bad-input"})


@dataclass(frozen=True)
class Failure:
    """Why a call failed: ``reason`` is a short stable code (``http-429``, ``timeout``,
    ``malformed-json``, ...), ``detail`` a human sentence (never holding a key)."""

    reason: str
    detail: str = ""
    retryable: bool = False
    retry_after: float | None = None
    cached: bool = False  # handed back from the call cache: no call was made this time

    def message(self) -> str:
        text = f"{self.reason}: {self.detail}" if self.detail else self.reason
        return f"{text} (cached failure; --retry-failed calls again)" if self.cached else text


class CallError(Exception):
    """Raised by a backend's call when it knows exactly how it failed.

    ``usage`` carries the tokens of an answer that arrived but could not be used (billed anyway).
    """

    def __init__(self, failure: Failure, usage: TokenUsage | None = None) -> None:
        super().__init__(failure.message())
        self.failure = failure
        self.usage = usage


def retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


def http_failure(
    status: int, detail: str = "", headers: Mapping[str, str] | None = None
) -> Failure:
    return Failure(
        reason=f"http-{status}",
        detail=detail,
        retryable=retryable_status(status),
        retry_after=parse_retry_after(headers or {}),
    )


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``retry-after`` (seconds or an HTTP date)."""
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_s: float = 0.5
    cap_s: float = 30.0
    # A retry-after longer than this is capped: a server asking for minutes is better retried later.
    max_retry_after_s: float = 120.0

    def delay(self, attempt: int, failure: Failure, rng: random.Random) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        d = min(self.cap_s, self.base_s * (2.0**attempt))
        wait = rng.uniform(d / 2.0, d)
        if failure.retry_after is not None:
            wait = max(wait, min(failure.retry_after, self.max_retry_after_s))
        return wait
