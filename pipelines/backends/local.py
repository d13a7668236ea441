"""What every local backend shares: building from a spec, call accounting, free dry runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddai.pipelines.backends import context as ctx_mod
from ddai.pipelines.backends.config import BackendSpec


class LocalBackend:
    """A backend that computes its answers in-process: no key, no network, no cost, no cache."""

    def __init__(self, spec: BackendSpec, role: str, context: ctx_mod.Context) -> None:
        self.spec = spec
        self.role = role
        self.name = spec.name
        self.context = context
        self._site = context.ledger.site(context.call_site, spec.name, spec.kind)

    @classmethod
    def from_spec(cls, spec: BackendSpec, role: str, **context: Any):
        return cls(spec, role, ctx_mod.make(role, use_cache=False, **context))

    def _count(self, n: int, failed: dict[str, int] | None = None) -> None:
        self._site.items += n
        self._site.calls += n
        bad = sum((failed or {}).values())
        self._site.ok += n - bad
        for reason, k in (failed or {}).items():
            self._site.failed[reason] += k

    def usage(self) -> dict[str, dict[str, Any]]:
        return self.context.ledger.snapshot()

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

    async def aclose(self) -> None:
        return None
