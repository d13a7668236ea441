"""Model backends (DESIGN.md, "Backends"): one layer every model-calling role goes through.

```python
from ddai.pipelines.backends import JudgeRequest, get_backend, run_sync

judge = get_backend("judge", "flash", call_site="curate.focus")  # or None: flag/env/config/local
results = run_sync(judge.judge([JudgeRequest("q?", "42", "forty-two")]))
judge.usage()  # calls, cache hits, failures by reason, tokens and cost per call site
```

``get_backend`` resolves the name (``config.resolve``), then builds the kind's class; the SDKs and
model files are imported only when a backend of their kind is built.
"""

from __future__ import annotations

import importlib
from typing import Any

from ddai.pipelines.backends.base import (
    ROLES,
    VERDICTS,
    Embedder,
    EmbedError,
    EmbedItem,
    GenerateRequest,
    GenerateResult,
    Generator,
    GTVerifier,
    Judge,
    JudgeRequest,
    JudgeResult,
    MultimodalEmbedder,
    RewriteRequest,
    RewriteResult,
    Search,
    SearchError,
    ThinkRewriter,
    VerifyRequest,
    VerifyResult,
    VetRequest,
    VetResult,
    Vetter,
    VQAModel,
    VQARequest,
    VQAResult,
    run_sync,
)
from ddai.pipelines.backends.config import (
    BackendSpec,
    ConfigError,
    require_key,
    require_price,
    resolve,
)

# kind, or (kind, role) where one kind serves a role through another class (an openai embedder
# talks to the embeddings endpoint, not a prompt) -> (module, class); each class has
# ``from_spec(spec, role, **context)``.
_BUILDERS: dict[str | tuple[str, str], tuple[str, str]] = {
    ("openai", "embedder"): ("ddai.pipelines.backends.openai_embedder", "OpenAIEmbedder"),
    "openai": ("ddai.pipelines.backends.openai_backend", "OpenAIBackend"),
    "gemini": ("ddai.pipelines.backends.gemini_backend", "GeminiBackend"),
    "local-judge": ("ddai.pipelines.backends.local_judge", "LocalJudge"),
    "extractive": ("ddai.pipelines.backends.extractive", "ExtractiveGenerator"),
    "identity": ("ddai.pipelines.backends.identity", "IdentityRewriter"),
    "local-verifier": ("ddai.pipelines.backends.gt_check", "LocalVerifier"),
    "simulator": ("ddai.pipelines.backends.vqa_simulator", "SimulatorVQA"),
    "bm25": ("ddai.pipelines.backends.bm25", "BM25Search"),
    "search-http": ("ddai.pipelines.backends.search_http", "HTTPSearch"),
    "minilm": ("ddai.pipelines.backends.embedders", "MiniLMEmbedder"),
    "hash": ("ddai.pipelines.backends.embedders", "HashEmbedder"),
    "local-vetter": ("ddai.pipelines.backends.local_vetter", "LocalVetter"),
}

CONTEXT_KEYS = (
    "call_site",
    "cache",
    "corpus",
    "progress",
    "ledger",
    "max_cost",
    "simulator",
    "retry_failed",
)


def get_backend(
    role: str, name: str | None = None, *, config: dict[str, Any] | None = None, **context: Any
):
    """Build the backend ``role`` should use.

    ``name``: the role flag's value (None: ``$DDAI_<ROLE>``, then ``ddai.toml`` ``[roles]``, then
    ``local``). ``config``: a parsed ``ddai.toml`` (default: the working directory's). Context:

    - ``call_site``: label under which calls, tokens and cost are accounted (default: the role);
    - ``cache``: the call cache's path, or False for none (default: ``workspace.cache_path()``);
    - ``corpus``: a ``ddai.pipelines.pages.corpus.Corpus`` or the path of its ``pages.parquet``
      (local search, extractive generator);
    - ``progress``: show a rich progress bar (default: only on a terminal);
    - ``ledger``: a shared ``usage.Ledger`` so several backends report together;
    - ``max_cost``: USD; calls that would exceed it fail with reason ``max-cost`` (resumable);
    - ``simulator``: the VQA simulator instance for the ``simulator`` kind;
    - ``retry_failed``: call again what failed before (default: hand back the cached failure).
    """
    unknown = set(context) - set(CONTEXT_KEYS)
    if unknown:
        raise TypeError(
            f"unknown backend context {sorted(unknown)}; known: {', '.join(CONTEXT_KEYS)}"
        )
    spec = resolve(role, name, config)
    return build(spec, role, **context)


def step_backend(
    role: str,
    name: str | None,
    cfg: Any,
    call_site: str,
    *,
    config: dict[str, Any] | None = None,
    **context: Any,
):
    """``get_backend`` for a step whose config carries the call flags: ``cfg.max_cost``,
    ``cfg.progress`` and ``cfg.retry_failed`` (``context``: any other, see ``get_backend``).

    A remote backend without its key is refused (``ConfigError``, naming the variable and the
    role's flag ``--<role>``) unless the step is a dry run (``cfg.dry_run``), which calls nothing:
    every call would fail ``no-key``."""
    spec = resolve(role, name, config)
    if not getattr(cfg, "dry_run", False):
        require_key(spec, role, f"--{role}")
    flags = {"max_cost": cfg.max_cost, "progress": cfg.progress, "retry_failed": cfg.retry_failed}
    return get_backend(role, name, config=config, call_site=call_site, **flags, **context)


def build(spec: BackendSpec, role: str, **context: Any):
    """Build a backend from an explicit spec (tests and tools that make specs in code). A
    ``max_cost`` on a remote backend with no price is refused (``ConfigError``): it could not
    stop anything."""
    require_price(spec, context.get("max_cost"))
    module, cls = _BUILDERS.get((spec.kind, role)) or _BUILDERS[spec.kind]
    return getattr(importlib.import_module(module), cls).from_spec(spec, role, **context)


__all__ = [
    "ROLES",
    "VERDICTS",
    "BackendSpec",
    "ConfigError",
    "EmbedError",
    "EmbedItem",
    "Embedder",
    "GTVerifier",
    "GenerateRequest",
    "GenerateResult",
    "Generator",
    "Judge",
    "JudgeRequest",
    "JudgeResult",
    "MultimodalEmbedder",
    "RewriteRequest",
    "RewriteResult",
    "Search",
    "SearchError",
    "ThinkRewriter",
    "VQAModel",
    "VQARequest",
    "VQAResult",
    "VerifyRequest",
    "VerifyResult",
    "VetRequest",
    "VetResult",
    "Vetter",
    "build",
    "get_backend",
    "resolve",
    "run_sync",
    "step_backend",
]
