"""Requests-per-minute / tokens-per-minute limits and the spending cap.

``TokenBucket`` is the classic bucket: it holds up to a minute's allowance, refills continuously,
and a caller waits until its amount is there. Waiters are served in arrival order (one lock), so a
large request is not starved by a stream of small ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """At most ``per_minute`` units per minute, bursts up to one minute's worth."""

    def __init__(
        self,
        per_minute: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_minute <= 0:
            raise ValueError(f"a per-minute limit must be > 0, got {per_minute}")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # units per second
        self._level = self.capacity
        self._clock = clock
        self._sleep = sleep
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
        self._stamp = now

    async def acquire(self, amount: float = 1.0) -> None:
        # A single request larger than the bucket waits for a full bucket, then goes.
        amount = min(float(amount), self.capacity)
        async with self._lock:
            self._refill()
            while self._level < amount:
                await self._sleep((amount - self._level) / self.rate)
                self._refill()
            self._level -= amount

    def debit(self, amount: float) -> None:
        """Charge usage found out after the fact (actual tokens above the estimate)."""
        self._refill()
        self._level -= amount


class Budget:
    """A spending cap: calls reserve their estimated cost before they start.

    ``reserve`` refuses a call whose estimate would take spent + in-flight over the cap, so a run
    stops *before* exceeding it; finished calls settle at their real cost.
    """

    def __init__(self, max_cost: float) -> None:
        if max_cost < 0:
            raise ValueError(f"max cost must be >= 0 USD, got {max_cost}")
        self.max_cost = float(max_cost)
        self.spent = 0.0
        self.reserved = 0.0

    def reserve(self, estimate: float) -> bool:
        if self.spent + self.reserved + estimate > self.max_cost:
            return False
        self.reserved += estimate
        return True

    def settle(self, estimate: float, actual: float) -> None:
        self.reserved = max(self.reserved - estimate, 0.0)
        self.spent += actual
