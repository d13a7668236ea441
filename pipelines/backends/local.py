"""What every local backend shares: building from a spec, call accounting, free dry runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddai.pipelines.backends.config import BackendSpec
from ddai.pipelines.backends.context import Backend, Context


class LocalBackend(Backend):
    """A backend that computes its answers in-process: no key, no network, no cost, no cache."""

    caches = False

    def __init__(self, spec: BackendSpec, role: str, context: Context) -> None:
        super().__init__(spec, role, context)
        self._site = context.ledger.site(context.call_site, spec.name, spec.kind)

    def _count(self, n: int, failed: dict[str, int] | None = None) -> None:
        self._site.items += n
        self._site.calls += n
        bad = sum((failed or {}).values())
        self._site.ok += n - bad
        for reason, k in (failed or {}).items():
            self._site.failed[reason] += k

    def plan(self, reqs: Sequence[Any]) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.spec.kind,
            "items": len(reqs),
            "cached": 0,
            "cached_failures": 0,
            "duplicates": 0,
            "to_call": len(reqs),
            "est_input_tokens": 0,
            "est_output_tokens": 0,
            "est_cost_usd": 0.0,
        }

    async def ping(self) -> dict[str, Any]:
        return {"ok": True, "latency_s": 0.0, "detail": f"local ({self.spec.kind})"}
