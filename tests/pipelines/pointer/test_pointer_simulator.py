"""The deterministic VQA simulator: hand-computed probabilities, order invariance, and the
demonstrations' measurable effect."""

from __future__ import annotations

import pytest

from ddai.pipelines.backends import VQARequest, get_backend, run_sync
from ddai.pipelines.backends.vqa_simulator import VQASimulator
from ddai.pipelines.pointer.world import WorldConfig, make_world
from ddai.pipelines.records.metrics import vqa_accuracy_symmetric

META = {
    "query_id": "q1",
    "answer_type": "count",
    "topic": "farm",
    "answer": "2",
    "answers": ["2"] * 7 + ["3"] * 2 + ["1"],
    "distractor": "5",
}
GOOD = {"demo_id": "d1", "answer_type": "count", "topic": "farm", "clean": True}
NOISY = {"demo_id": "d2", "answer_type": "count", "topic": "farm", "clean": False}
SCENE = {"demo_id": "d3", "answer_type": "color", "topic": "farm", "clean": True}
OTHER = {"demo_id": "d4", "answer_type": "color", "topic": "beach", "clean": True}


def test_p_correct_by_hand():
    sim = VQASimulator(base=0.1, peak=0.9, same_type_noisy=0.25, same_topic=0.15)
    assert sim.p_correct([GOOD, GOOD], META) == pytest.approx(0.9)
    assert sim.p_correct([OTHER, OTHER], META) == pytest.approx(0.1)
    # mean h = (1 + 0.15) / 2 = 0.575 -> 0.1 + 0.8 * 0.575 = 0.56
    assert sim.p_correct([GOOD, SCENE], META) == pytest.approx(0.56)
    # mean h = (0.25 + 0) / 2 -> 0.1 + 0.8 * 0.125 = 0.2
    assert sim.p_correct([NOISY, OTHER], META) == pytest.approx(0.2)
    assert sim.p_correct([], META) == pytest.approx(0.1)


def test_answers_are_deterministic_and_order_invariant():
    a, b = VQASimulator(), VQASimulator()
    for qid in range(50):
        meta = {**META, "query_id": f"q{qid}"}
        first = a.answer("prompt one", [GOOD, SCENE], meta)
        assert (
            first
            == a.answer("another prompt", [SCENE, GOOD], meta)
            == b.answer("", [GOOD, SCENE], meta)
        )
    assert VQASimulator(seed=1).answer("", [GOOD, SCENE], META) is not None


def test_helpful_demonstrations_measurably_raise_accuracy():
    world = make_world(WorldConfig(seed=0, n_queries=300, n_demos=50))
    sim = VQASimulator()
    good, bad = [], []
    for q in world.queries:
        helpful = [
            {
                "demo_id": f"h{i}",
                "answer_type": q["answer_type"],
                "topic": q["topic"],
                "clean": True,
            }
            for i in range(2)
        ]
        useless = [
            {"demo_id": f"u{i}", "answer_type": "none", "topic": "nowhere", "clean": True}
            for i in range(2)
        ]
        good.append(vqa_accuracy_symmetric(sim.answer("", helpful, q), q["answers"]))
        bad.append(vqa_accuracy_symmetric(sim.answer("", useless, q), q["answers"]))
    # (scored symmetrically: the world's annotators vary surface forms, "two" vs "2")
    # p = 0.95 vs 0.1; over 300 queries the full-credit rates sit near them
    assert sum(g == 1.0 for g in good) / 300 > 0.88
    assert sum(b == 1.0 for b in bad) / 300 < 0.18
    # wrong answers are a minority answer (at most 2 annotators: partial credit) or the distractor
    assert {round(b, 1) for b in bad if b < 1.0} <= {0.0, 0.3, 0.6}


def test_the_local_vqa_backend_wraps_the_simulator():
    sim = VQASimulator(seed=7)
    backend = get_backend("vqa", "local", simulator=sim, cache=False)
    reqs = [
        VQARequest(prompt="p", examples=(GOOD, SCENE), meta={**META, "query_id": f"q{i}"})
        for i in range(20)
    ]
    out = run_sync(backend.answer(reqs))
    assert [r.answer for r in out] == [sim.answer("p", [GOOD, SCENE], r.meta) for r in reqs]


def test_invalid_probabilities_are_refused():
    with pytest.raises(ValueError, match="base"):
        VQASimulator(base=0.9, peak=0.5)
