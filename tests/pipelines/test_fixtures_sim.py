"""The simulator's pure parts: the judge, the draw stream, run rewards and the funnel rules."""

from __future__ import annotations

import pytest

from ddai.pipelines.fixtures import RUNS, build_world
from ddai.pipelines.fixtures.draws import Draws
from ddai.pipelines.fixtures.policy import sim_judge, simulate_rollout
from ddai.pipelines.fixtures.runs import at_or_under, bucket
from ddai.pipelines.records import tags


@pytest.mark.parametrize(
    ("answer", "reference", "score"),
    [
        ("42%", "42%", 1.0),
        ("1894", "1,894", 1.0),  # numbers compare canonically
        ("The 42%", "42%", 1.0),  # articles do not count
        ("approximately 42%", "42%", 0.5),  # hedged but right
        ("43%", "42%", 0.0),
        ("Cannot determine from the provided images.", "42%", 0.0),
        (None, "42%", 0.0),
    ],
)
def test_sim_judge(answer, reference, score):
    assert sim_judge(answer, reference) == score


def test_draws_are_a_function_of_the_seed():
    a, b = Draws([7, 1]), Draws([7, 1])
    seq = [a.random() for _ in range(600)]  # more than one block
    assert seq == [b.random() for _ in range(600)]
    assert seq != [Draws([7, 2]).random() for _ in range(600)]
    d = Draws(3)
    assert all(0 <= d.below(5) < 5 for _ in range(500))
    assert {d.below(3) for _ in range(200)} == {0, 1, 2}
    assert sorted(d.shuffled(range(10))) == list(range(10))
    assert len(set(d.sample("abcdef", 4))) == 4
    h = d.hex(32)
    assert len(h) == 32 and int(h, 16) >= 0


def test_run_rewards():
    # phase 1: 0.1 + 0.9·0.5 = 0.55 with the format gate passed, 0 without.
    assert RUNS["phase1"].reward(None, 0.5, True) == pytest.approx(0.55, abs=1e-15)
    assert RUNS["phase1"].reward(None, 1.0, False) == 0.0
    # curriculum: 0.8·1 + 0.2·0.5 = 0.9 (no format gate in phase 2).
    assert RUNS["curriculum"].reward(1.0, 0.5, False) == pytest.approx(0.9, abs=1e-15)
    # focused rounds: the judge alone.
    assert RUNS["focused_r1"].reward(0.5, 1.0, True) == 0.5
    assert [s.n_agent for s in RUNS.values()] == [8, 8, 16, 16]


def test_bucket_sorts_by_score_with_ties_in_dataset_order():
    scores = {"a": 0.8, "b": 0.7, "c": 0.1, "d": 0.05, "e": 0.7, "f": 0.71}
    got = bucket(["a", "b", "c", "d", "e", "f"], scores)
    # 0.7 is A (≤ 0.7), 0.71 is B; b and e tie at 0.7 and keep their dataset order.
    assert got == {"B": ["a", "f"], "A": ["b", "e", "c"], "0": ["d"]}
    assert at_or_under(["b", "e", "c"], {"b": 0.2, "e": 0.21, "c": 0.0}, 0.2) == ["b", "c"]


def test_a_rollout_parses_back_and_shows_only_first_unseen_results():
    world = build_world(5, 10)
    prompt = world.prompts[0]
    rng = Draws([1])
    for k in range(40):
        sim = simulate_rollout(world, prompt, 0, 5, k, rng, judge=True)
        text = "".join(t.text for t in sim.turns)
        parsed = tags.parse_turns(text)
        assert [(t.think, t.action, t.arg, t.error) for t in parsed] == [
            (t.think, t.action, t.arg, t.error) for t in sim.turns
        ]
        seen: list[str] = []
        for t in sim.turns:
            if t.executed == "search":
                unseen = [p for p in t.results if p not in seen]
                assert t.shown == (unseen[0] if unseen else t.results[0])
                seen += [] if t.shown in seen else [t.shown]
        assert sim.shown == seen
        assert sim.judge == sim_judge(sim.answer, prompt.answer)
