"""Reward formula, presets, and streaming scoring with a timeout."""

from __future__ import annotations

import asyncio
import math

import pytest

from ddai.pipelines.backends import GenerateResult, JudgeResult
from ddai.trainer.episode.rewards import (
    REWARD_PRESETS,
    Judged,
    RewardSpec,
    StreamingScorer,
    compute_reward,
    reward_preset,
    unscorable_reason,
)

# DDAI's NDCG of one correct page out of two golden ones: 1 / (1 + 1/log2 3) = 0.613147
NDCG_HALF = 1 / (1 + 1 / math.log2(3))


def test_phase1_preset():
    spec = REWARD_PRESETS["ddai-phase1"]
    ok = compute_reward(spec, format_ok=True, retrieved=["a"], golden=["a", "b"], judge=None)
    assert ok.reward == pytest.approx(0.1 + 0.9 * NDCG_HALF)  # 0.651832
    assert ok.ndcg == pytest.approx(NDCG_HALF)
    bad = compute_reward(spec, format_ok=False, retrieved=["a"], golden=["a", "b"], judge=None)
    assert bad.reward == 0.0 and bad.parts["gate"] == 0.0


def test_judge_only_and_curriculum_presets():
    judge_only = reward_preset("judge-only")
    r = compute_reward(judge_only, format_ok=False, retrieved=[], golden=["a"], judge=0.7)
    assert r.reward == pytest.approx(0.7)  # no gate: DDAI's focused rounds train on the judge alone
    cur = reward_preset("curriculum")
    r = compute_reward(cur, format_ok=True, retrieved=["x", "a"], golden=["a"], judge=1.0)
    # NDCG of the golden page at rank 2 with one golden page: (1/log2 3) / 1 = 0.630930
    assert r.reward == pytest.approx(0.8 + 0.2 / math.log2(3))
    with pytest.raises(ValueError, match="curriculum, ddai-phase1, judge-only"):
        reward_preset("phase9")


def test_curriculum_without_the_gate_is_ddai_curriculum_run():
    # DDAI's curriculum run (RM_FORMAT_COEF unset) scored a format failure 0.8·judge + 0.2·NDCG;
    # ddai's preset gates it to 0, and --no-gate gives DDAI's number back.
    from ddai.trainer.episode.config import RewardOverrides

    kw = dict(format_ok=False, retrieved=["x", "a"], golden=["a"], judge=1.0)
    assert compute_reward(RewardOverrides(reward="curriculum").reward_spec(), **kw).reward == 0.0
    ungated = RewardOverrides(reward="curriculum", gate=False).reward_spec()
    assert compute_reward(ungated, **kw).reward == pytest.approx(0.8 + 0.2 / math.log2(3))


def test_custom_weights_missing_judge_counts_zero():
    spec = RewardSpec(w_judge=0.5, w_ndcg=0.0, w_format=0.25, bias=0.0, gate=False)
    r = compute_reward(spec, format_ok=True, retrieved=[], golden=[], judge=None)
    assert r.reward == pytest.approx(0.25) and r.judge is None


class SlowGenerator:
    name = "slow"

    def __init__(self, delay):
        self.delay = delay
        self.calls = 0

    async def generate(self, reqs):
        self.calls += len(reqs)
        await asyncio.sleep(self.delay)
        return [
            GenerateResult(
                answer=r.page_texts[0] if r.page_texts else None,
                error=None if r.page_texts else "no evidence",
            )
            for r in reqs
        ]


class ContainsJudge:
    name = "contains"

    async def judge(self, reqs):
        return [JudgeResult(score=float(r.reference in r.answer)) for r in reqs]


def test_scorer_judges_group_and_skips_gated_items():
    gen = SlowGenerator(0.0)
    scorer = StreamingScorer(gen, ContainsJudge())
    try:
        fut = scorer.submit(
            [
                {"question": "q", "reference": "30", "evidence": [("p", "revenue 30")]},
                {"question": "q", "reference": "30", "evidence": [("p", "revenue 10")]},
                {"question": "q", "reference": "30", "evidence": [], "skip": False},
                {"question": "q", "reference": "30", "evidence": [("p", "30")], "skip": True},
            ]
        )
        out = fut.result(timeout=10)
    finally:
        scorer.close()
    assert [o.judge for o in out] == [1.0, 0.0, None, None]
    assert out[0].answer == "revenue 30"
    assert out[2].error == "generator: no evidence"
    assert gen.calls == 3  # the gated item cost nothing


def test_scorer_overlaps_with_caller():
    """submit() returns at once: the calls run on the scorer's loop while the caller works."""
    scorer = StreamingScorer(SlowGenerator(0.3), ContainsJudge())
    try:
        fut = scorer.submit([{"question": "q", "reference": "x", "evidence": [("p", "x")]}])
        assert not fut.done()  # the generator is still sleeping on the scorer's loop
        assert fut.result(timeout=10)[0].judge == 1.0
    finally:
        scorer.close()


def test_unscorable_reason_needs_a_judge_the_gate_let_through():
    cur = REWARD_PRESETS["curriculum"]
    assert unscorable_reason(cur, format_ok=True, judged=Judged(judge=0.0)) is None  # a real 0
    assert unscorable_reason(cur, format_ok=True, judged=Judged(error="timeout")) == "timeout"
    assert unscorable_reason(cur, format_ok=True, judged=None) == "not judged"
    assert unscorable_reason(cur, format_ok=False, judged=None) is None  # gated: scores 0
    phase1 = REWARD_PRESETS["ddai-phase1"]  # no judge in the reward
    assert unscorable_reason(phase1, format_ok=True, judged=None) is None


def test_ddai_reward_gives_none_for_timeouts_and_failures_and_counts_them():
    """TRL turns None into NaN and leaves it out of the group's mean and std (advantage 0)."""
    import concurrent.futures
    from types import SimpleNamespace

    from ddai.trainer.episode.scoring import DdaiReward, ScoreStore

    def traj(key, fmt=True):
        return SimpleNamespace(
            key=key,
            episode=SimpleNamespace(
                format_ok=fmt, retrieved=["p1"], turns=[1], evidence="", images=[]
            ),
            task=SimpleNamespace(reference_pages=["p1"], question="q", reference_answer="a"),
        )

    done = concurrent.futures.Future()
    done.set_result([Judged(judge=1.0), Judged(error="judge: HTTP 500")])
    hung = concurrent.futures.Future()  # never finishes: a judge timeout
    futures = iter([done, hung])  # the judge's answer to each submitted group, in order
    scorer = SimpleNamespace(submit=lambda items: next(futures))
    trajs = {k: traj(k) for k in ("a0", "a1", "b0")} | {"b1": traj("b1", fmt=False)}
    ro = ScoreStore(REWARD_PRESETS["curriculum"], scorer)
    ro.keep(list(trajs.values()))
    ro.submit([trajs["a0"], trajs["a1"]])
    ro.submit([trajs["b0"], trajs["b1"]])
    logged = {}
    rewards = asyncio.run(
        DdaiReward(ro, timeout=0.05)(
            None, None, ["a0", "a1", "b0", "b1"], log_metric=lambda k, v: logged.update({k: v})
        )
    )
    # a0: 0.8·1 + 0.2·NDCG 1; a1 judge failed, b0 timed out: unscorable; b1 gated: a real 0.
    assert rewards == [pytest.approx(1.0), None, None, 0.0]
    assert ro.score_of("a1").unscorable == "judge: HTTP 500"
    assert ro.score_of("b0").unscorable == "timeout"
    assert logged["ddai/unscorable"] == 2.0 and logged["ddai/judge_coverage"] == pytest.approx(
        1 / 3
    )
