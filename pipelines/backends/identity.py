"""The local rewriter: returns every think unchanged (distillation without a rewrite model)."""

from __future__ import annotations

from collections.abc import Sequence

from ddai.pipelines.backends.base import RewriteRequest, RewriteResult
from ddai.pipelines.backends.local import LocalBackend


class IdentityRewriter(LocalBackend):
    async def rewrite(self, reqs: Sequence[RewriteRequest]) -> list[RewriteResult]:
        self._count(len(reqs))
        return [RewriteResult(thinks=list(r.thinks)) for r in reqs]
