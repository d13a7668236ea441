"""The ``search-http`` backend's ``ddai-batch`` protocol (what DDAI's trainer sends, AGENTS.md
"Search API contract") and the ``/health`` route, against the fake search service on 127.0.0.1:
``POST`` of ``[{"query", "id", "request_idx"}]``, answers read back by ``request_idx``, every
search restricted to document ``id``, a service that ignores ``id`` an error."""

from __future__ import annotations

import pytest
from support.fakes_search import FakeSearchServer, hash_ranker, search_http_backend

from ddai.pipelines.backends import SearchError
from ddai.pipelines.backends.base import run_sync
from ddai.pipelines.backends.search_http import parse_ddai_batch
from ddai.pipelines.records.prompt_row import ddai_search_id

PAGES = [f"{d}_{p}" for d in (10, 11, 12) for p in (1, 2, 3, 4)]


def backend(url: str, protocol: str = "ddai-batch", **table):
    return search_http_backend(url, protocol, **table)


def test_the_search_id_is_the_uids_trailing_number_as_ddai_derives_it():
    assert ddai_search_id("train_2747") == "2747"
    assert ddai_search_id("train_007") == "7"  # int(): DDAI sends str(int(...))
    assert ddai_search_id("slidevqa-12-3") == "3"
    assert ddai_search_id("q") == "-1" and ddai_search_id("12a") == "-1"


def test_answers_are_read_by_request_idx_not_by_position():
    body = [
        {"request_idx": 1, "results": [{"image_file": "x/11_2.jpg"}]},
        {"request_idx": 0, "results": [{"image_file": "x/10_1.jpg"}, {"image_file": "10_3.png"}]},
    ]
    assert parse_ddai_batch(body, [0, 1]) == [[("10_1", 1.0), ("10_3", 0.5)], [("11_2", 1.0)]]
    with pytest.raises(ValueError, match=r"no answer for request_idx \[1\]"):
        parse_ddai_batch(body[1:], [0, 1])
    with pytest.raises(ValueError, match="answered twice"):
        parse_ddai_batch([body[0], body[0]], [1])
    with pytest.raises(ValueError, match="no request_idx"):
        parse_ddai_batch([{"results": []}], [0])


def test_one_post_carries_every_query_with_its_document_and_request_idx():
    with FakeSearchServer(pages=PAGES, top_k=3) as srv:
        search = backend(srv.ddai_url)
        asks = [("revenue", "10"), ("revenue", "11"), ("share", "12"), ("revenue", "10")]
        out = search.search_batch(asks, k=5)
        assert srv.requests == 1 and srv.queries == 3  # the repeated (query, doc) asked once
        sent = [(q, doc) for q, doc, _ in srv.batch_answered]
        assert sent == [("revenue", "10"), ("revenue", "11"), ("share", "12")]
        for (q, doc), hits in zip(asks, out, strict=True):
            own = [p for p in PAGES if p.startswith(f"{doc}_")]
            assert [p for p, _ in hits] == hash_ranker(own, 3)(q)
            assert all(p.startswith(f"{doc}_") for p, _ in hits)
        assert out[0] == out[3]
        # No document: DDAI's "-1", an unrestricted search.
        srv.reset()
        hits = search.search("revenue", k=5)
        assert srv.batch_answered[0][1] == "-1"
        assert [p for p, _ in hits] == hash_ranker(PAGES, 3)("revenue")


def test_a_service_that_ignores_the_document_is_an_off_document_error():
    with FakeSearchServer(pages=PAGES, top_k=3, ignore_id=True) as srv:
        search = backend(srv.ddai_url)
        rank = hash_ranker(PAGES, 3)
        q = next(q for q in (f"q{i}" for i in range(50)) if {p[:2] for p in rank(q)} != {"10"})
        (out,) = search.search_batch([(q, "10")], k=5)
        assert isinstance(out, SearchError) and out.reason == "off-document"
        assert "document 10" in str(out) and "must restrict" in str(out)
        # Unrestricted ("-1") answers are taken as they come.
        assert [p for p, _ in search.search(q, k=5)] == rank(q)


def test_the_get_protocol_still_sends_no_document_and_filters_after():
    with FakeSearchServer(pages=PAGES, top_k=12) as srv:
        hits = backend(srv.ddai_url, "ddai").search("revenue", k=5, doc="11")
        assert srv.batch_answered == [] and srv.queries == 1
        assert hits and all(p.startswith("11_") for p, _ in hits)


def test_ping_asks_health_then_searches():
    with FakeSearchServer(pages=PAGES, top_k=3) as srv:
        ping = run_sync(backend(srv.ddai_url).ping())
        assert ping["ok"], ping
        assert srv.health_requests == 1 and srv.queries == 1
        assert f"{srv.url}/health: healthy" in ping["detail"]


@pytest.mark.parametrize(
    ("health", "want"),
    [("500", "answered HTTP 500"), ("unhealthy", "reports status 'unhealthy'")],
)
def test_a_failing_health_route_fails_the_ping_naming_its_url(health, want):
    with FakeSearchServer(pages=PAGES, top_k=3, health=health) as srv:
        ping = run_sync(backend(srv.ddai_url).ping())
        assert not ping["ok"]
        assert f"GET {srv.url}/health" in ping["detail"] and want in ping["detail"]
        assert srv.queries == 0  # no search after a failed health check


def test_a_service_without_health_is_pinged_with_a_real_query():
    with FakeSearchServer(pages=PAGES, top_k=3, health=None) as srv:
        ping = run_sync(backend(srv.ddai_url, "ddai").ping())
        assert ping["ok"] and "no health route" in ping["detail"] and srv.queries == 1
        # An explicit health_url is asked instead of the default one.
        srv.reset()
        ping = run_sync(backend(srv.ddai_url, health_url=f"{srv.url}/_fake/stats").ping())
        assert ping["ok"] and f"{srv.url}/_fake/stats" in ping["detail"]
