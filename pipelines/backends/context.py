"""What a backend is built with besides its spec (call site, cache, ledger, corpus, limits), and
``Backend``, the base every backend class builds on."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddai.pipelines.backends.cache import CallCache
from ddai.pipelines.backends.usage import Ledger
from ddai.pipelines.store import workspace

if TYPE_CHECKING:
    from ddai.pipelines.backends.config import BackendSpec
    from ddai.pipelines.pages.corpus import Corpus


@dataclass
class Context:
    call_site: str
    cache: CallCache | None = None
    ledger: Ledger = field(default_factory=Ledger)
    progress: bool | None = None
    max_cost: float | None = None
    corpus: Corpus | None = None
    simulator: Any = None
    retry_failed: bool = False  # call again what failed before instead of the cached failure


def make(
    role: str,
    *,
    use_cache: bool = True,
    call_site: str | None = None,
    cache: CallCache | str | os.PathLike[str] | bool | None = None,
    corpus: Corpus | str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    ledger: Ledger | None = None,
    max_cost: float | None = None,
    simulator: Any = None,
    retry_failed: bool = False,
) -> Context:
    """Resolve ``get_backend``'s context arguments (see its docstring for their meaning)."""
    return Context(
        call_site=call_site or role,
        cache=open_cache(cache) if use_cache else None,
        ledger=ledger if ledger is not None else Ledger(),
        progress=progress,
        max_cost=max_cost,
        corpus=load_corpus(corpus),
        simulator=simulator,
        retry_failed=retry_failed,
    )


def open_cache(cache: CallCache | str | os.PathLike[str] | bool | None) -> CallCache | None:
    if cache is False:
        return None
    if isinstance(cache, CallCache):
        return cache
    if cache is None or cache is True:
        return CallCache(workspace.cache_path())
    return CallCache(Path(cache))


def cache_note(backend: Backend, cache: object, flag: str = "--cache") -> dict[str, str]:
    """The summary line of a command given a call cache (``flag``) that ``backend`` does not keep
    (a local backend, or ``cache = false`` in ddai.toml): the flag has no effect, said so."""
    if cache is None or isinstance(cache, bool) or backend.context.cache is not None:
        return {}
    return {"cache note": f"the {backend.name} {backend.role} is not cached: {flag} has no effect"}


def load_corpus(corpus: Corpus | str | os.PathLike[str] | None) -> Corpus | None:
    if corpus is None or not isinstance(corpus, str | os.PathLike):
        return corpus
    from ddai.pipelines.pages.corpus import Corpus

    return Corpus.load(corpus)


class Backend:
    """One backend serving one role: its spec, role and the context it was built with."""

    caches = True
    """Whether ``from_spec`` opens the call cache (when the spec's ``cache`` allows it)."""

    def __init__(self, spec: BackendSpec, role: str, context: Context) -> None:
        self.spec = spec
        self.role = role
        self.name = spec.name
        self.context = context

    @classmethod
    def from_spec(cls, spec: BackendSpec, role: str, **context: Any):
        return cls(spec, role, make(role, use_cache=cls.caches and spec.cache, **context))

    def usage(self) -> dict[str, dict[str, Any]]:
        return self.context.ledger.snapshot()

    async def aclose(self) -> None:
        """Release connections (optional: they are also dropped with the backend)."""
