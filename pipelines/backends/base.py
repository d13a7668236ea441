"""The model-backend contracts (DESIGN.md, "Backends"): request/result records and protocols.

Every model-calling role is a small protocol. The LLM-shaped roles (judge, generator, rewriter,
verifier, VQA) are async and take a batch: one call hands the backend a whole list so it can run
the requests concurrently, answer repeats from its cache and account for them together. A result
never hides a failure: when a call fails for good, ``error`` holds the reason and the value field is
``None``; the caller decides what a failure is worth (a reward of 0, a skipped row, a retry later).

Search and embedding are local, CPU-bound work, so their protocols are plain synchronous calls.
``run_sync`` runs one of the async calls from code that has no event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from ddai.pipelines.records.deps import np
from ddai.pipelines.records.lazy import lazy_module

asyncio = lazy_module("asyncio")

ROLES = ("judge", "generator", "rewriter", "verifier", "vqa", "search", "embedder", "vetter")
Verdict = Literal["ok", "wrong", "uncertain"]
VERDICTS: tuple[Verdict, ...] = ("ok", "wrong", "uncertain")

T = TypeVar("T")


# ---------------------------------------------------------------- requests and results


class _Result:
    """What every result record shares: its first field is the value, None when ``error`` is set."""

    error: str | None

    @property
    def ok(self) -> bool:
        value = getattr(self, fields(self)[0].name)  # type: ignore[arg-type]
        return self.error is None and value is not None


@dataclass(frozen=True)
class JudgeRequest:
    """Grade ``answer`` against the ground truth ``reference`` for ``question``."""

    question: str
    reference: str
    answer: str


@dataclass(frozen=True)
class JudgeResult(_Result):
    """``score`` in [0, 1], or None with ``error`` set when the call failed."""

    score: float | None
    reason: str = ""
    error: str | None = None


@dataclass(frozen=True)
class GenerateRequest:
    """Answer ``question`` from evidence pages (ids ``{doc}_{page}``), with their text if known.

    ``page_texts`` is aligned with ``pages``; when None the backend looks the text up in its corpus.
    ``images`` are page image paths or data URLs for multimodal generators (ignored by text ones).
    """

    question: str
    pages: Sequence[str] = ()
    page_texts: Sequence[str] | None = None
    images: Sequence[str] = ()


@dataclass(frozen=True)
class GenerateResult(_Result):
    answer: str | None
    error: str | None = None


@dataclass(frozen=True)
class RewriteRequest:
    """Rewrite a trajectory's think texts (one per turn); ``context`` is e.g. the question."""

    thinks: Sequence[str]
    context: str | None = None


@dataclass(frozen=True)
class RewriteResult(_Result):
    """The rewritten thinks, same count and order as the request's, or None with ``error``."""

    thinks: list[str] | None
    error: str | None = None


@dataclass(frozen=True)
class VerifyRequest:
    """Check the ground truth ``reference`` of ``question`` against its reference page text.

    ``images``: the reference pages' image paths or data URLs for multimodal verifiers (ignored by
    text ones)."""

    question: str
    reference: str
    page_text: str
    images: Sequence[str] = ()


@dataclass(frozen=True)
class VerifyResult(_Result):
    """``ok``: the page supports the reference; ``wrong``: the page contradicts it; else
    ``uncertain``. ``verdict`` is None only when the call failed (``error`` set)."""

    verdict: Verdict | None
    reason: str = ""
    error: str | None = None


@dataclass(frozen=True)
class VQARequest:
    """A VQA prompt with in-context demonstrations.

    ``images``: paths or data URLs of the query's images; ``examples``: the demonstrations, each a
    dict (``question``, ``answer``, ``images``, ...); ``meta``: anything a simulator or logger needs
    (e.g. the query id), never sent to a remote model.
    """

    prompt: str
    images: Sequence[str] = ()
    examples: Sequence[dict[str, Any]] = ()
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class VQAResult(_Result):
    answer: str | None
    error: str | None = None


# DDAI's two vetting criteria sets (``scripts/vet_sft_rollouts_gpt.py`` and
# ``scripts/filter_sft_queries_gpt.py``): a whole-trajectory pass/fail with its failed criteria,
# and a label per search query (a gibberish or code query drops the trajectory; drift is kept).
VET_SETS = ("rollout", "queries")
ROLLOUT_CRITERIA = (
    "query_collapse",
    "repetitive_actions",
    "gibberish",
    "evidence_mismatch",
    "format_violation",
)
QUERY_LABELS = ("ok", "drift", "gibberish", "code")


@dataclass(frozen=True)
class VetRequest:
    """Vet one SFT trajectory under the criteria set ``criteria`` (``VET_SETS``).

    ``queries``/``bboxes``/``thinks``: the trajectory's search queries, bbox arguments and think
    texts in order (thinks already cut to the vetting length); ``counters``: simple counts the
    judge sees too (searches, system errors, grammar faults, ...). The ``queries`` set sends the
    question and the queries only."""

    criteria: str
    question: str
    queries: tuple[str, ...] = ()
    bboxes: tuple[str, ...] = ()
    thinks: tuple[str, ...] = ()
    counters: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class VetResult(_Result):
    """What the vetter said: ``keep`` (its own pass/fail), the ``criteria`` it found failed (names
    from ``ROLLOUT_CRITERIA`` for the rollout set), a label per query (``QUERY_LABELS``, the
    queries set) and a short ``reason``; ``keep`` is None only when the call failed (``error``)."""

    keep: bool | None
    criteria: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    reason: str = ""
    error: str | None = None


# ---------------------------------------------------------------- protocols


@runtime_checkable
class Judge(Protocol):
    name: str

    async def judge(self, reqs: Sequence[JudgeRequest]) -> list[JudgeResult]: ...


@runtime_checkable
class Generator(Protocol):
    name: str

    async def generate(self, reqs: Sequence[GenerateRequest]) -> list[GenerateResult]: ...


@runtime_checkable
class ThinkRewriter(Protocol):
    name: str

    async def rewrite(self, reqs: Sequence[RewriteRequest]) -> list[RewriteResult]: ...


@runtime_checkable
class GTVerifier(Protocol):
    name: str

    async def verify(self, reqs: Sequence[VerifyRequest]) -> list[VerifyResult]: ...


@runtime_checkable
class Vetter(Protocol):
    name: str

    async def vet(self, reqs: Sequence[VetRequest]) -> list[VetResult]: ...


@runtime_checkable
class VQAModel(Protocol):
    name: str

    async def answer(self, reqs: Sequence[VQARequest]) -> list[VQAResult]: ...


@runtime_checkable
class Search(Protocol):
    """Ranked retrieval over a page corpus; ``doc`` restricts the ranking to one document.

    A service-backed search (``search-http``) raises ``SearchError`` when a query failed for good,
    and also offers ``search_batch([(query, doc), ...], k)`` → per pair its hits or its
    ``SearchError``, which the environment uses to send one turn's searches together.
    """

    name: str

    def search(self, query: str, k: int = 5, doc: str | None = None) -> list[tuple[str, float]]: ...


@runtime_checkable
class Embedder(Protocol):
    """Texts → unit-norm vectors, ``float32 [N, dim]``."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class EmbedItem:
    """What to embed together: a text and its images (paths or data URLs), e.g. a VQA question
    with the picture it asks about."""

    text: str
    images: Sequence[str] = ()


@runtime_checkable
class MultimodalEmbedder(Protocol):
    """Texts with images → unit-norm vectors, ``float32 [N, dim']`` (``dim'`` may differ from the
    text-only ``dim``); a failed call raises ``EmbedError``, never returns a made-up vector."""

    name: str

    def embed_items(self, items: Sequence[EmbedItem]) -> np.ndarray: ...


class EmbedError(RuntimeError):
    """Embedding calls that failed for good; ``failed`` counts them by reason."""

    def __init__(self, backend: str, failed: dict[str, int], example: str = "") -> None:
        reasons = ", ".join(f"{k} × {n}" for k, n in sorted(failed.items()))
        super().__init__(
            f"embedder {backend!r}: {sum(failed.values())} calls failed ({reasons})"
            + (f"; e.g. {example}" if example else "")
        )
        self.failed = dict(failed)


class SearchError(RuntimeError):
    """A search that failed for good (after the engine's retries): ``reason`` is a short code
    (``http-500``, ``timeout``, ``connection``, ``bad-response``, ``off-document``), ``detail``
    a sentence."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# ---------------------------------------------------------------- sync helper


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code.

    Outside an event loop this is ``asyncio.run``; inside one (a notebook, a running server) the
    coroutine runs on a fresh loop in a helper thread, since a running loop cannot be re-entered.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def _target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=_target, name="ddai-run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
