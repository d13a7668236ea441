"""The scoring store (``ddai.trainer.episode.scoring.ScoreStore``): the one owner of an episode
from its rollout to its log row; judge calls only where the reward uses the judge; nothing kept
after the rows are taken."""

from __future__ import annotations

import asyncio
import concurrent.futures
from types import SimpleNamespace

import pytest

from ddai.trainer.episode.rewards import REWARD_PRESETS, Judged
from ddai.trainer.episode.scoring import ScoreStore


def _traj(key: str, fmt: bool = True, retrieved=("p1",)):
    return SimpleNamespace(
        key=key,
        episode=SimpleNamespace(
            format_ok=fmt, retrieved=list(retrieved), turns=[1, 2], evidence="e", images=[]
        ),
        task=SimpleNamespace(reference_pages=["p1"], question="q", reference_answer="a"),
    )


class _Judge:
    """A scorer whose groups are judged at once with the given scores."""

    def __init__(self, *scores: float) -> None:
        self.scores = list(scores)
        self.sent: list[list[dict]] = []

    def submit(self, items):
        self.sent.append(items)
        fut = concurrent.futures.Future()
        fut.set_result([Judged(judge=self.scores.pop(0)) for _ in items])
        return fut


def test_a_judged_group_is_scored_popped_once_and_forgotten():
    judge = _Judge(0.5, 0.5)
    store = ScoreStore(REWARD_PRESETS["curriculum"], judge)
    group = [_traj("g0"), _traj("g1", fmt=False)]
    store.keep(group)
    store.submit(group)
    # the gated format failure goes to the judge as `skip` (it scores 0 without a judge)
    assert [i["skip"] for i in judge.sent[0]] == [False, True]
    rewards, metrics = asyncio.run(store.score(["g0", "g1"], timeout=1.0))
    # g0: 0.8 · 0.5 (judge) + 0.2 · 1 (NDCG of p1 at rank 1) = 0.6; g1: gated, a real 0
    assert rewards == [pytest.approx(0.6), 0.0]
    assert metrics["ddai/format_ok"] == 0.5 and metrics["ddai/num_turns"] == 2.0
    assert store.score_of("g0").reward == pytest.approx(0.6)
    traj, judged, score = store.pop("g0")
    assert traj is group[0] and judged.judge == 0.5 and score.reward == pytest.approx(0.6)
    store.pop("g1")
    assert len(store) == 0 and store.score_of("g0") is None
    with pytest.raises(KeyError):
        store.pop("g0")


def test_a_reward_without_the_judge_sends_nothing():
    judge = _Judge()
    store = ScoreStore(REWARD_PRESETS["ddai-phase1"], judge)
    t = _traj("k", retrieved=("p2", "p1"))
    store.keep([t])
    store.submit([t])
    assert judge.sent == []
    rewards, metrics = asyncio.run(store.score(["k"], timeout=0.01))
    # ddai-phase1: 0.1 + 0.9 · NDCG; p1 at rank 2 of one golden page: NDCG = 1/log2(3)
    assert rewards == [pytest.approx(0.1 + 0.9 / 1.584962500721156)]
    assert "ddai/judge_coverage" not in metrics
    _, judged, _ = store.pop("k")
    assert judged is None
