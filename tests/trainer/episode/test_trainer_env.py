"""The search environment: actions, observations, termination and the evidence set."""

from __future__ import annotations

import pytest

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records import tags
from ddai.pipelines.records.prompt_row import golden_page_ids
from ddai.trainer.episode.env import BBOX_FAILED, SEARCH_EMPTY, EnvConfig, SearchEnv
from ddai.trainer.episode.tasks import task_from_row


class ListSearch:
    """Returns a fixed ranking for every query (empty for the query "nothing")."""

    name = "list"

    def __init__(self, ranking):
        self.ranking = ranking
        self.calls = []

    def search(self, query, k=5, doc=None):
        self.calls.append((query, k, doc))
        return [] if query == "nothing" else [(p, 1.0) for p in self.ranking[:k]]


@pytest.fixture
def corpus():
    lines = lambda texts: [  # noqa: E731
        {"text": t, "bbox": [0, 100 * i, 800, 100 * i + 90]} for i, t in enumerate(texts)
    ]
    return Corpus.from_records(
        [
            {
                "doc_id": "7",
                "page": 1,
                "lines": lines(["Title", "Revenue 2021: 30"]),
                "width": 800,
                "height": 600,
            },
            {
                "doc_id": "7",
                "page": 2,
                "lines": lines(["Costs", "Staff 12"]),
                "width": 800,
                "height": 600,
            },
        ]
    )


def turn(action: str, arg: str) -> str:
    return f"<think>t</think>\n<{action}>{arg}</{action}>"


def test_search_shows_first_unseen_page_and_dedupes(corpus):
    env = SearchEnv(ListSearch(["7_1", "7_2"]), corpus)
    ep = env.reset("q")
    r1 = env.step(ep, turn("search", "revenue"))
    r2 = env.step(ep, turn("search", "revenue again"))
    r3 = env.step(ep, turn("search", "third"))  # both seen: the top one again
    assert r1.observation.startswith("[page 7_1]\nTitle\nRevenue 2021: 30")
    assert r2.observation.startswith("[page 7_2]")
    assert r3.observation.startswith("[page 7_1]")
    assert ep.retrieved == ["7_1", "7_2"]
    assert [t.retrieved for t in ep.turns] == [["7_1"], ["7_2"], ["7_1"]]
    assert ep.evidence[0] == ("7_1", "Title\nRevenue 2021: 30")


def test_bbox_crops_lines_of_last_page(corpus):
    env = SearchEnv(ListSearch(["7_2"]), corpus)
    ep = env.reset("q")
    assert (
        env.step(ep, turn("bbox", "[0, 0, 10, 10]")).observation == BBOX_FAILED
    )  # nothing shown yet
    env.step(ep, turn("search", "costs"))
    r = env.step(ep, turn("bbox", "[0, 150, 800, 160]"))  # touches only line 2 (y 100..190)
    assert r.observation == "[crop of 7_2 [0, 150, 800, 160]]\nStaff 12"
    assert ep.evidence[-1] == ("7_2", "Staff 12")
    assert env.step(ep, turn("bbox", "[900, 900, 950, 950]")).observation == BBOX_FAILED
    assert ep.retrieved == ["7_2"]  # crops are not retrievals


def test_invalid_turn_gets_corrective_observation(corpus):
    env = SearchEnv(ListSearch(["7_1"]), corpus)
    ep = env.reset("q")
    r = env.step(ep, "I will just answer: 30")
    assert not r.done and "invalid action (no think)" in r.observation
    assert ep.turns[0].action == "invalid"
    r = env.step(ep, turn("search", "nothing"))
    assert r.observation == SEARCH_EMPTY


def test_complete_ends_episode(corpus):
    env = SearchEnv(ListSearch(["7_1"]), corpus)
    ep = env.reset("q")
    env.step(ep, turn("search", "x"))
    r = env.step(ep, turn("search_complete", "true"))
    assert r.done and r.observation is None and ep.terminated == "complete" and ep.format_ok
    with pytest.raises(RuntimeError):
        env.step(ep, turn("search", "x"))


@pytest.mark.parametrize("force", [True, False])
def test_max_turns_with_and_without_forced_completion(corpus, force):
    # DDAI's loop (vrag_agent/generation.py) runs max_turns steps and writes the forced completion
    # *as* the last one: with max_turns 3 the policy writes 2 turns, then the forced turn is the
    # 3rd (its published distilled rows of a 15-turn round hold at most 15 assistant turns).
    env = SearchEnv(ListSearch(["7_1"]), corpus, EnvConfig(max_turns=3, force_completion=force))
    ep = env.reset("q")
    assert not env.step(ep, turn("search", "a")).done
    r = env.step(ep, turn("search", "b"))
    if force:
        assert r.done and ep.terminated == "max_turns"
        assert r.forced == tags.FORCED_COMPLETION
        assert r.observation is not None  # the 2nd search's page is shown before the forced turn
        assert ep.turns[-1].forced and ep.format_ok  # DDAI counts the forced completion as valid
        assert len(ep.turns) == 3 and [t.action for t in ep.turns[:2]] == ["search", "search"]
    else:
        assert not r.done  # without the forced turn the policy writes all max_turns turns
        r = env.step(ep, turn("search", "c"))
        assert r.done and ep.terminated == "max_turns"
        assert r.forced is None and not ep.format_ok and len(ep.turns) == 3


def test_forced_completion_needs_a_turn_for_the_policy():
    with pytest.raises(
        ValueError,
        match=r"max_turns 1 \(the forced completion takes the last turn\): use at least 2",
    ):
        EnvConfig(max_turns=1, force_completion=True)
    with pytest.raises(ValueError, match="max_turns 0: use at least 1"):
        EnvConfig(max_turns=0, force_completion=False)
    assert EnvConfig(max_turns=1, force_completion=False).max_turns == 1


def test_truncate_and_restrict_to_doc(corpus):
    search = ListSearch(["7_1"])
    env = SearchEnv(
        search, corpus, EnvConfig(restrict_to_doc=True, search_k=3), truncate=lambda s: s[:9]
    )
    ep = env.reset("q", doc_id="7")
    assert env.step(ep, turn("search", "x")).observation == "[page 7_1"
    assert search.calls == [("x", 3, "7")]


def test_task_from_verl_row():
    row = {
        "id": "train_12",
        "file_name": "12.pdf",
        "reference_page": [3, 5],
        "data_source": "slidevqa",
        "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Question: Q?"}],
        "reward_model": {"ground_truth": "42", "style": "rule"},
        "extra_info": {"question": "Q?", "answer": "42"},
    }
    task = task_from_row(row)
    assert task.uid == "train_12" and task.question == "Q?" and task.reference_answer == "42"
    assert task.reference_pages == ("12_3", "12_5") and task.doc_id == "12"
    assert golden_page_ids("a/b/9.pdf", [1]) == ["9_1"]
