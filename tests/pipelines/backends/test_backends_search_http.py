"""The ``search-http`` backend against the fake search service on 127.0.0.1: both wire protocols,
batching, retries, failures as ``SearchError``, the opt-in cache, config errors and the ping."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.fakes_search import FakeSearchServer, hash_ranker, search_http_backend
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.backends import ConfigError, SearchError, get_backend
from ddai.pipelines.backends.check import check_backends
from ddai.pipelines.backends.search_http import page_id_of, parse_ddai, parse_search_r1

PAGES = [f"{d}_{p}" for d in (10, 11, 12) for p in (1, 2, 3)]


def backend(url: str, protocol: str = "ddai", **table):
    return search_http_backend(url, protocol, **table)


@pytest.fixture
def server():
    with FakeSearchServer(pages=PAGES, top_k=3) as srv:
        yield srv


def test_page_id_is_the_image_basename_without_extension():
    assert page_id_of("./search_engine/corpus/img/2747_12.jpg") == "2747_12"
    assert page_id_of("C:\\corpus\\img\\8_5.png") == "8_5"
    assert page_id_of("8_5") == "8_5"


def test_parsers_reject_answers_of_the_wrong_shape():
    assert parse_ddai(
        [[{"idx": 0, "image_file": "a/1_2.jpg"}, {"idx": 1, "image_file": "3_4.jpg"}]], 1
    ) == [[("1_2", 1.0), ("3_4", 0.5)]]
    with pytest.raises(ValueError, match="2 result lists"):
        parse_ddai([[]], 2)
    body = {"result": [[{"document": {"id": "7_1", "contents": "x"}, "score": 12.5}]]}
    assert parse_search_r1(body, 1) == [[("7_1", 12.5)]]
    with pytest.raises(ValueError, match="document id"):
        parse_search_r1({"result": [[{"document": {"contents": "x"}}]]}, 1)


def test_ddai_protocol_batches_queries_in_one_get(server):
    search = backend(server.ddai_url)
    queries = ["revenue by year", "phone share", "rainfall june"]
    out = search.search_batch([(q, None) for q in queries], k=5)
    rank = hash_ranker(PAGES, 3)
    assert [[p for p, _ in hits] for hits in out] == [rank(q) for q in queries]
    assert [s for _, s in out[0]] == [1.0, 0.5, 1 / 3]
    assert server.requests == 1 and server.queries == 3
    assert [q for q, _ in server.answered] == queries
    # A repeated query is asked once; the caller still gets one slot per request.
    server.reset()
    out = search.search_batch([("a", None), ("a", None), ("b", None)], k=5)
    assert out[0] == out[1] and server.queries == 2


def test_batch_size_splits_requests_and_top_k_cuts(server):
    search = backend(server.ddai_url, batch_size=2, top_k=2)
    out = search.search_batch([(f"q{i}", None) for i in range(5)], k=5)
    assert server.requests == 3 and server.queries == 5
    assert all(len(hits) == 2 for hits in out)
    usage = search.usage()["search"]
    assert usage["items"] == 5 and usage["calls"] == 3 and usage["ok"] == 3


def test_search_r1_protocol_posts_topk_and_keeps_scores(server):
    search = backend(server.search_r1_url, "search-r1", top_k=2)
    hits = search.search("energy mix", k=5)
    assert [p for p, _ in hits] == hash_ranker(PAGES, 3)("energy mix")[:2]
    assert [s for _, s in hits] == [1.0, 0.5]
    assert server.requests == 1


def test_doc_restriction_keeps_that_documents_pages(server):
    search = backend(server.ddai_url)
    rank = hash_ranker(PAGES, 3)
    q = next(q for q in (f"q{i}" for i in range(50)) if len({p[:2] for p in rank(q)}) == 2)
    doc = rank(q)[0].split("_")[0]
    hits = search.search(q, k=5, doc=doc)
    assert hits and all(p.startswith(f"{doc}_") for p, _ in hits)
    assert [p for p, _ in hits] == [p for p in rank(q) if p.startswith(f"{doc}_")]


def test_a_500_is_retried_then_answered():
    with FakeSearchServer(pages=PAGES, script=["500", "503"]) as srv:
        hits = backend(srv.ddai_url, max_retries=2).search("x", k=3)
        assert len(hits) == 3 and srv.requests == 3 and srv.faults == {"500": 1, "503": 1}


def test_failures_come_back_as_search_errors():
    with FakeSearchServer(pages=PAGES, fault="500") as srv:
        search = backend(srv.ddai_url, max_retries=1)
        (out,) = search.search_batch([("x", None)], k=3)
        assert isinstance(out, SearchError) and out.reason == "http-500"
        assert srv.requests == 2  # the first try and one retry
        with pytest.raises(SearchError, match="http-500"):
            search.search("x", k=3)
    with FakeSearchServer(pages=PAGES, fault="hang", hang_s=10) as srv:
        search = backend(srv.ddai_url, max_retries=0, timeout_s=0.3)
        (out,) = search.search_batch([("x", None)], k=3)
        assert isinstance(out, SearchError) and out.reason == "timeout"
    # Nothing listens here: a connection failure, also a SearchError, not a crash.
    (out,) = backend("http://127.0.0.1:9/search", max_retries=0).search_batch([("x", None)])
    assert isinstance(out, SearchError) and out.reason == "connection"


def test_cache_is_off_by_default_and_on_by_flag(server, tmp_path):
    search = backend(server.ddai_url)
    assert search.cache is None
    search.search("same", k=3)
    search.search("same", k=3)
    assert server.requests == 2
    server.reset()
    cached = backend(server.ddai_url, cache=True)
    first = cached.search("same", k=3)
    again = cached.search("same", k=3)
    assert first == again and server.requests == 1
    assert cached.usage()["search"]["cache_hits"] == 1


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="needs `url`"):
        get_backend("search", "svc", config={"backends": {"svc": {"kind": "search-http"}}})
    with pytest.raises(ConfigError, match="protocol 'grpc' is unknown"):
        backend("http://127.0.0.1:9/search", "grpc")
    with pytest.raises(ConfigError, match="cannot serve --judge"):
        get_backend(
            "judge", "svc", config={"backends": {"svc": {"kind": "search-http", "url": "u"}}}
        )


def test_backends_check_pings_a_search_service(server):
    cfg = {
        "backends": {
            "svc": {"kind": "search-http", "url": server.ddai_url, "timeout_s": 2},
            "gone": {"kind": "search-http", "url": "http://127.0.0.1:9/search", "max_retries": 0},
        },
        "roles": {"search": "svc"},
    }
    out = check_backends(cfg, cache=None)
    rows = {r["name"]: r for r in out["backends"]}
    assert rows["svc"]["ping"]["ok"] and "3 result(s)" in rows["svc"]["ping"]["detail"]
    assert rows["svc"]["roles"] == ["search"] and rows["svc"]["cache"] is False
    assert not rows["gone"]["ping"]["ok"] and "connection" in rows["gone"]["ping"]["detail"]
    assert server.queries == 1 and server.answered[0][0] == "ping"


def test_backends_check_cli_reports_an_unreachable_search_service(tmp_path, monkeypatch, server):
    (tmp_path / "ddai.toml").write_text(
        f"""
[backends.svc]
kind = "search-http"
url = "{server.search_r1_url}"
protocol = "search-r1"

[backends.gone]
kind = "search-http"
url = "http://127.0.0.1:9/search"
max_retries = 0

[roles]
search = "svc"
""",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["backends", "check", "--json"])
    assert res.exit_code == 1, res.output
    s = json.loads(res.output)
    assert s["unreachable"] == ["gone"] and s["roles"]["search"] == "svc"


@pytest.mark.parametrize("protocol", ["ddai", "ddai-batch", "search-r1"])
def test_a_service_that_answers_no_page_fails_the_ping(protocol):
    """A service up with an empty index answers every query with no page: its ping is not "ok"
    (a training run's every search would come back empty)."""
    with FakeSearchServer(ranker=lambda q: []) as srv:
        url = srv.search_r1_url if protocol == "search-r1" else srv.ddai_url
        out = asyncio.run(backend(url, protocol).ping())
    assert out["ok"] is False and "no page" in out["detail"] and url in out["detail"]
