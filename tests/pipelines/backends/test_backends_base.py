"""The contracts: every built-in backend satisfies its role's protocol; ``run_sync`` anywhere."""

from __future__ import annotations

import asyncio

import pytest

from ddai.pipelines.backends import (
    BackendSpec,
    Embedder,
    Generator,
    GTVerifier,
    Judge,
    JudgeRequest,
    Search,
    ThinkRewriter,
    VQAModel,
    build,
    get_backend,
    run_sync,
)
from ddai.pipelines.pages.corpus import Corpus

PROTOCOLS = {
    "judge": Judge,
    "generator": Generator,
    "rewriter": ThinkRewriter,
    "verifier": GTVerifier,
    "vqa": VQAModel,
    "search": Search,
    "embedder": Embedder,
}


@pytest.mark.parametrize("role", [r for r in PROTOCOLS if r != "embedder"])
def test_local_defaults_satisfy_their_protocols(role):
    corpus = Corpus.from_records([{"doc_id": "1", "page": 1, "text": "hello"}])
    backend = get_backend(role, "local", config={}, corpus=corpus)
    assert isinstance(backend, PROTOCOLS[role])


def test_hash_embedder_satisfies_the_embedder_protocol():
    assert isinstance(get_backend("embedder", "hash", config={}), Embedder)


@pytest.mark.parametrize("kind", ["openai", "gemini"])
@pytest.mark.parametrize("role", ["judge", "generator", "rewriter", "verifier", "vqa"])
def test_remote_backends_satisfy_every_model_protocol(kind, role):
    backend = build(
        BackendSpec(name="r", kind=kind, model="m", base_url="http://127.0.0.1:9"),
        role,
        cache=False,
    )
    assert isinstance(backend, PROTOCOLS[role])
    other = next(r for r in ("judge", "verifier") if r != role)
    wrong_method = {"judge": "judge", "verifier": "verify"}[other]
    with pytest.raises(TypeError, match=f"built for --{role}, not --{other}"):
        run_sync(getattr(backend, wrong_method)([]))


def test_run_sync_inside_a_running_loop():
    judge = get_backend("judge", "local", config={})

    async def caller():
        # A synchronous helper called from async code: run_sync must not re-enter this loop.
        return run_sync(judge.judge([JudgeRequest("q", "x", "x")]))

    [r] = asyncio.run(caller())
    assert r.score == 1.0
