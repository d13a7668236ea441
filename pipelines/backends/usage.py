"""Token usage and cost, accumulated per call site.

A *call site* is the label a caller gives its backend (``curate.verify-gt``, ``trainer.reward``):
the ledger answers "what did this step spend, and on what" for manifests and summaries.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@dataclass(frozen=True)
class Price:
    """USD per million input and output tokens."""

    in_per_mtok: float = 0.0
    out_per_mtok: float = 0.0

    def cost(self, usage: TokenUsage) -> float:
        return (
            usage.input_tokens * self.in_per_mtok + usage.output_tokens * self.out_per_mtok
        ) / 1e6


FREE = Price()
"""The price of a backend that costs nothing per token (local kinds, services)."""


@dataclass
class SiteUsage:
    """What one (call site, backend) pair did.

    ``items``: results handed back; ``cache_hits``: of those, answered from the cache;
    ``deduplicated``: repeats of a request already in the same batch, answered by its one call
    (free, but not a cache hit: a dry run counts them apart); ``concurrent_answers``: requests
    another process on the same cache had in flight, answered (or failed) by its call while this
    one waited (free: not paid here); ``calls``: items the model was asked for; ``attempts``:
    requests sent, retries included; ``failed``: items that failed for good, by reason (of them
    ``cached_failures`` handed back from the cache). ``items == cache_hits + cached_failures +
    deduplicated + concurrent_answers + calls`` for the model-backed engine, a spending-cap stop
    aside.
    """

    backend: str
    model: str | None
    items: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    concurrent_answers: int = 0
    calls: int = 0
    ok: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    cached_failures: int = 0  # of ``failed``: failures handed back from the cache, not called
    attempts: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None: a backend with no price was called (cost unknown)

    def to_dict(self) -> dict[str, Any]:
        """Every field in order, ``failed`` by reason name and the cost rounded to 1e-6 USD."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {
            **out,
            "failed": dict(sorted(self.failed.items())),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
        }


class Ledger:
    """Thread-safe accumulator of ``SiteUsage`` keyed by ``(call_site, backend)``."""

    def __init__(self) -> None:
        self._sites: dict[tuple[str, str], SiteUsage] = {}
        self._lock = threading.Lock()

    def site(self, call_site: str, backend: str, model: str | None) -> SiteUsage:
        with self._lock:
            key = (call_site, backend)
            if key not in self._sites:
                self._sites[key] = SiteUsage(backend=backend, model=model)
            return self._sites[key]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{call_site: usage}``; a call site used with several backends gets ``site[backend]``."""
        with self._lock:
            sites = Counter(site for site, _ in self._sites)
            return {
                (site if sites[site] == 1 else f"{site}[{backend}]"): u.to_dict()
                for (site, backend), u in sorted(self._sites.items())
            }


FAILED_CALLS = "failed calls"
"""The summary key under which a command lists its failed model calls by reason (exit 1)."""


def failed_calls(snapshot: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Failed items by reason over every site of a ledger snapshot (cached failures included)."""
    total: Counter[str] = Counter()
    for site in snapshot.values():
        total.update(site.get("failed") or {})
    return dict(sorted(total.items()))
