"""The local rewriter: returns every think unchanged (distillation without a rewrite model)."""

from __future__ import annotations

from collections.abc import Sequence

from ddai.pipelines.backends.base import RewriteRequest, RewriteResult
from ddai.pipelines.backends.local import LocalBackend


class IdentityRewriter(LocalBackend):
    # Its answer is known without the call: distill skips the work and ``account``s the calls.
    returns_thinks_unchanged = True

    def account(self, n: int) -> None:
        """Count ``n`` requests answered without being sent (every think as it was)."""
        self._count(n)

    async def rewrite(self, reqs: Sequence[RewriteRequest]) -> list[RewriteResult]:
        self._count(len(reqs))
        return [RewriteResult(thinks=list(r.thinks)) for r in reqs]
