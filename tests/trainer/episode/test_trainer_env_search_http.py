"""The search environment over an HTTP search service: one turn's searches go out in one batched
request, the page shown is the service's, and failures become ``[System Error: …]`` observations
counted per episode."""

from __future__ import annotations

from support.fakes_search import FakeSearchServer, hash_ranker

from ddai.pipelines.backends import get_backend
from ddai.trainer import toy
from ddai.trainer.episode.env import SEARCH_FAILED, EnvConfig, SearchEnv

PAGES = toy.corpus().pages()


def http_search(url: str, **table):
    cfg = {
        "backends": {
            "svc": {
                "kind": "search-http",
                "url": url,
                "timeout_s": 2,
                "backoff_base_s": 0.01,
                **table,
            }
        }
    }
    return get_backend("search", "svc", config=cfg)


def turn(query: str) -> str:
    return f"<think>look</think>\n<search>{query}</search>"


def test_one_turn_of_many_episodes_is_one_request_and_shows_the_services_pages():
    rank = hash_ranker(PAGES, 3)
    with FakeSearchServer(pages=PAGES, top_k=3) as srv:
        env = SearchEnv(http_search(srv.ddai_url), toy.corpus(), EnvConfig(max_turns=4))
        eps = [env.reset(f"question {i}") for i in range(4)]
        texts = [turn(f"query {i}") for i in range(3)] + [
            "<think>done</think><search_complete>true</search_complete>"
        ]
        assert env.prefetch(list(zip(eps, texts, strict=True))) == 3
        results = [env.step(ep, text) for ep, text in zip(eps, texts, strict=True)]
        assert srv.requests == 1 and srv.queries == 3
        for i in range(3):
            shown = rank(f"query {i}")[0]
            assert eps[i].retrieved == [shown] and eps[i].turns[0].retrieved == [shown]
            assert results[i].observation.startswith(f"[page {shown}]")
        assert eps[3].done and eps[3].retrieved == []
        # Second turn, same query: the first page not yet seen is shown (DDAI's rule).
        env.prefetch([(eps[0], turn("query 0"))])
        env.step(eps[0], turn("query 0"))
        assert eps[0].retrieved == rank("query 0")[:2] and srv.requests == 2


def test_failed_searches_are_system_error_observations_and_counted():
    with FakeSearchServer(pages=PAGES, script=["500", "500", "hang", "hang"], hang_s=10) as srv:
        search = http_search(srv.ddai_url, max_retries=1, timeout_s=0.3)
        env = SearchEnv(search, toy.corpus(), EnvConfig(max_turns=4))
        ep = env.reset("q")
        env.prefetch([(ep, turn("a"))])
        res = env.step(ep, turn("a"))
        assert res.observation == SEARCH_FAILED.format(reason="http-500")
        assert res.observation.startswith("[System Error: ") and not res.done
        assert ep.search_errors == 1 and ep.retrieved == []
        assert ep.turns[0].error.startswith("search failed: http-500")
        # Without a prefetch the step asks the backend itself; a hang is a timeout.
        res = env.step(ep, turn("b"))
        assert res.observation == SEARCH_FAILED.format(reason="timeout")
        assert ep.search_errors == 2 and srv.requests == 4  # each tried twice
        # The service is back: the episode goes on with real pages.
        env.step(ep, turn("c"))
        assert ep.retrieved == [hash_ranker(PAGES, 3)("c")[0]] and ep.search_errors == 2


def test_a_page_the_text_corpus_lacks_is_still_shown():
    with FakeSearchServer(ranker=lambda q: ["999_1"]) as srv:
        env = SearchEnv(http_search(srv.ddai_url), toy.corpus(), EnvConfig(max_turns=4))
        ep = env.reset("q")
        res = env.step(ep, turn("x"))
        assert ep.retrieved == ["999_1"] and res.observation == "[page 999_1]\n"
        assert ep.evidence == [("999_1", "")]
