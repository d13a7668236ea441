"""Reward latency/coverage and zero-variance drop/keep on the hand-planted store."""

from __future__ import annotations

import json

import pytest
from analysis_world import planted_store

from ddai.pipelines import store
from ddai.pipelines.analyses import MissingData, drop_keep, reward_latency


@pytest.fixture
def logs(tmp_path):
    return planted_store(tmp_path)[0]


def test_latency_and_coverage_per_run(logs):
    _, summary = reward_latency(logs, None)
    r = summary["runs"]["r"]
    assert (r["rollouts"], r["rewarded"], r["judged"]) == (30, 29, 29)
    assert r["coverage"] == pytest.approx(29 / 30)
    assert r["with_latency"] == 4
    assert r["mean_latency_s"] == pytest.approx(2.5)
    assert r["p50_latency_s"] == pytest.approx(2.5)  # interpolated between 2 and 3
    assert r["p90_latency_s"] == pytest.approx(3.7)  # 3 + 0.7 * (4 - 3)
    assert r["max_latency_s"] == 4.0
    assert (r["errors"], r["timeouts"]) == (1, 1)


def test_latency_per_step(logs):
    steps, _ = reward_latency(logs, None)
    rows = {s["step"]: s for s in steps.to_dicts()}
    assert set(rows) == {1, 2}
    assert (rows[1]["rollouts"], rows[1]["rewarded"], rows[1]["timeouts"]) == (28, 27, 1)
    assert (rows[2]["rollouts"], rows[2]["with_latency"], rows[2]["coverage"]) == (2, 0, 1.0)


def test_latency_needs_scores(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "bare", [{"uid": "u", "rollout_idx": 0}])
    with pytest.raises(MissingData, match="run bare has no rewards or judge scores"):
        reward_latency(logs, ["bare"])


def test_drop_keep_decisions_and_groups(logs):
    decisions, groups, summary = drop_keep(logs, None)
    got = {r["uid"]: (r["decision"], r["reason"]) for r in decisions.to_dicts()}
    zero = [("p1", "always_zero"), ("p2", "always_zero"), ("p3", "always_zero")]
    zero += [("p4", "always_zero"), ("p5", "always_zero")]
    assert got == {
        **{u: ("drop", why) for u, why in zero},
        "p6": ("keep", "reward_variance"),
        "p7": ("keep", "reward_variance"),
        "p8": ("drop", "always_full"),
    }
    assert [(g["step"], g["uid"], g["score"]) for g in groups.to_dicts()] == [
        (1, "p1", 0.0),
        (1, "p2", 0.0),
        (1, "p3", 0.0),
        (1, "p4", 0.0),
        (1, "p5", 0.0),
        (2, "p8", 1.0),
    ]
    assert summary["runs"]["r"] == {
        "prompts": 8,
        "groups": 8,
        "zero_variance_groups": 6,
        "keep": 2,
        "drop": {"always_zero": 5, "always_full": 1, "constant": 0},
    }


def test_drop_keep_needs_groups(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "single", [{"uid": "u", "rollout_idx": 0, "reward": 1.0}])
    with pytest.raises(MissingData, match="run single has no GRPO groups of two or more"):
        drop_keep(logs, ["single"])


def test_the_trainers_step_log_gives_expected_rollouts(logs):
    """Unified logs keep train.step.start / train.step.metrics as side tables at ingest."""
    side = logs / "_side"
    (side / "train.step.start").mkdir(parents=True)
    (side / "train.step.metrics").mkdir(parents=True)
    starts = [
        {"global_step": 1, "n_agent": 4, "train_batch_size": 8, "ids": [f"p{i}" for i in range(8)]},
        {"global_step": 2, "n_agent": 2, "train_batch_size": 8, "ids": ["p8"]},  # a short batch
    ]
    (side / "train.step.start" / "r.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in starts)
    )
    metrics = {"global_step": 1, "metrics": {"reward/streaming_sample_coverage": 0.9}}
    (side / "train.step.metrics" / "r.jsonl").write_text(json.dumps(metrics) + "\n")
    steps, summary = reward_latency(logs, None)
    r = summary["runs"]["r"]
    assert r["expected_rollouts"] == 8 * 4 + 1 * 2
    assert r["logged_share"] == pytest.approx(30 / 34)
    rows = {s["step"]: s for s in steps.to_dicts()}
    assert (rows[1]["expected_rollouts"], rows[1]["logged_coverage"]) == (32, 0.9)
    assert (rows[2]["expected_rollouts"], rows[2]["logged_coverage"]) == (2, None)
