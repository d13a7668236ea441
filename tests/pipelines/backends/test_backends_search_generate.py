"""Local search (BM25 over the corpus), the extractive generator, the identity rewriter, embedders."""

from __future__ import annotations

import numpy as np
import pytest

from ddai.pipelines.backends import (
    BackendSpec,
    ConfigError,
    GenerateRequest,
    RewriteRequest,
    build,
    get_backend,
    run_sync,
)
from ddai.pipelines.backends.bm25 import BM25Index
from ddai.pipelines.backends.embedders import hash_embed
from ddai.pipelines.backends.extractive import NO_ANSWER, extract
from ddai.pipelines.fixtures.world import build_world
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records import metrics

PAGES = [
    {"doc_id": "7", "page": 1, "text": "Annual report 2019\nPrepared by Acme"},
    {"doc_id": "7", "page": 2, "text": "Revenue by region (2019)\nNorth: 1,894\nSouth: 742"},
    {"doc_id": "9", "page": 1, "text": "Weather in Oslo\nRain: 42%"},
    {"doc_id": "9", "page": 2, "text": "Revenue by region (2020)\nNorth: 2,001\nSouth: 700"},
]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_records(PAGES)


def test_bm25_ranks_the_matching_page_first_and_restricts_to_a_doc(corpus):
    search = get_backend("search", "local", config={}, corpus=corpus)
    hits = search.search("revenue north 2019", k=2)
    assert [p for p, _ in hits] == ["7_2", "9_2"]
    assert hits[0][1] > hits[1][1] > 0
    in_doc = search.search("revenue north 2019", k=5, doc="9")
    assert [p for p, _ in in_doc] == ["9_2", "9_1"]
    assert search.search("revenue", k=5, doc="404") == []


def test_bm25_ties_keep_corpus_order_and_unknown_words_score_zero(corpus):
    index = BM25Index(
        [p.page_id for p in corpus], [p.doc_id for p in corpus], [p.text for p in corpus]
    )
    assert index.search("zebra", k=4) == [("7_1", 0.0), ("7_2", 0.0), ("9_1", 0.0), ("9_2", 0.0)]


def test_bm25_finds_golden_pages_of_the_synthetic_world():
    world = build_world(seed=0, size="small")
    search = get_backend("search", "local", config={}, corpus=world.corpus)
    found = sum(
        any(pid in p.true_page_ids for pid, _ in search.search(p.question, k=5, doc=p.doc_id))
        for p in world.prompts
    )
    assert found / len(world.prompts) >= 0.9


def test_search_needs_a_corpus():
    with pytest.raises(ConfigError, match="needs a page corpus"):
        get_backend("search", "bm25", config={})


def test_extract_reads_the_value_on_the_matching_line():
    texts = ["Revenue by region (2019)\nNorth: 1,894 million USD\nSouth: 742 million USD"]
    assert extract("What was the revenue of North in 2019?", texts) == "1,894"
    assert extract("What was South's revenue in 2019?", texts) == "742"
    assert (
        extract("Who prepared the report?", ["Annual report\nPrepared by: Acme Corp"])
        == "Acme Corp"
    )
    assert extract("What is the capital of Mars?", ["Nothing relevant here"]) == NO_ANSWER


def test_extractive_generator_answers_single_page_world_questions_from_golden_pages():
    world = build_world(seed=0, size="small")
    gen = get_backend("generator", "local", config={}, corpus=world.corpus)
    single = [p for p in world.prompts if not p.two_page]
    out = run_sync(gen.generate([GenerateRequest(p.question, p.true_page_ids) for p in single]))
    correct = sum(
        metrics.exact_match(r.answer, [p.true_answer]) for r, p in zip(out, single, strict=True)
    )
    assert correct == len(single)


def test_generator_without_text_or_corpus_fails_that_item():
    gen = get_backend("generator", "local", config={})
    out = run_sync(
        gen.generate(
            [GenerateRequest("q?", ["1_1"]), GenerateRequest("Rain?", ["x"], ["Rain: 42%"])]
        )
    )
    assert out[0].answer is None and out[0].error.startswith("no-text")
    assert out[1].answer == "42%"


def test_identity_rewriter_returns_the_thinks_unchanged():
    rw = get_backend("rewriter", "local", config={})
    [r] = run_sync(rw.rewrite([RewriteRequest(["a", "b c"], "q")]))
    assert r.thinks == ["a", "b c"] and r.ok


def test_hash_embedder_is_deterministic_unit_norm_and_similarity_aware():
    v = hash_embed(["revenue of north", "revenue of north!", "rain in oslo", ""], dim=64)
    assert v.shape == (4, 64) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-6)
    assert not v[3].any()
    # Same words, extra punctuation: identical features, so identical vectors.
    np.testing.assert_allclose(v[0], v[1])
    assert float(v[0] @ v[2]) < 0.5
    np.testing.assert_array_equal(
        v, hash_embed(["revenue of north", "revenue of north!", "rain in oslo", ""], dim=64)
    )


def test_hash_embedder_backend_dim_option():
    emb = build(BackendSpec(name="h", kind="hash", options={"dim": 32}), "embedder")
    assert emb.embed(["a b"]).shape == (1, 32)


@pytest.mark.slow
def test_minilm_embedder_from_the_packaged_model():
    emb = get_backend("embedder", "local", config={})
    v = emb.embed(
        ["The cat sits on the mat.", "A cat is sitting on a mat.", "Quarterly revenue rose 5%."]
    )
    assert emb.fallback is None
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.3
