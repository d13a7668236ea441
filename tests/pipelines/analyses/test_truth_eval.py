"""Precision and recall of an attribution against a truth table: hand-computed cases, then the
committed synthetic world (its planted wrong ground truths, retrieval and generator failures)."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest
from conftest import FIXTURES

from ddai.pipelines.analyses import AttributionConfig, attribute, truth_eval
from ddai.pipelines.fixtures.make import make_world
from ddai.pipelines.fixtures.runs import RUNS
from ddai.pipelines.fixtures.truth import failure_cause
from ddai.pipelines.fixtures.world import build_world
from ddai.pipelines.ingest import IngestConfig, ingest


def _df(rows):
    return pl.DataFrame(rows, schema=["run_id", "uid", "class"], orient="row")


def test_precision_and_recall_by_hand():
    truth = {
        "runs": {
            "a": {
                "failure_causes": {"wrong_gt": ["w"], "retrieval": ["r1", "r2"], "generator": ["g"]}
            },
        }
    }
    df = _df(
        [
            ("a", "w", "wrong_gt"),
            ("a", "r1", "search_failure"),
            ("a", "r2", "generator_bottleneck"),  # a retrieval failure called generator
            ("a", "g", "generator_bottleneck"),
            ("a", "x", "search_failure"),  # no planted cause: not counted in precision
            ("a", "y", None),
        ]
    )
    got = truth_eval.score(df, truth)
    c = got["classes"]
    assert (c["wrong_gt"]["precision"], c["wrong_gt"]["recall"]) == (1.0, 1.0)
    assert (c["search_failure"]["precision"], c["search_failure"]["recall"]) == (1.0, 0.5)
    assert (c["generator_bottleneck"]["precision"], c["generator_bottleneck"]["recall"]) == (
        0.5,
        1.0,
    )
    assert got["unplanted_attributed"] == 1


def test_runs_outside_the_truth_table_are_refused():
    with pytest.raises(ValueError, match="covers none of the attributed runs"):
        truth_eval.score(_df([("zz", "u", "wrong_gt")]), {"runs": {"a": {}}})


@pytest.fixture(scope="module")
def prompt():
    p = build_world(0, "small").prompts[0]
    return dataclasses.replace(p, true_pages=[3], wrong_gt_kind=None)


def test_planted_causes_by_hand(prompt):
    # focused round 1: reward = judge, max_turns 5 (4 searches)
    r1 = RUNS["focused_r1"]
    # p_find 0.01: q = 1 - 0.99^4 = 0.0394; failures 0.9606 without golden vs 0.0158 with it
    stuck = dataclasses.replace(prompt, p_find=(0.01,) * 4, p_read=(0.6,) * 4)
    assert failure_cause(stuck, r1) == "retrieval"
    # p_find 0.4: q = 0.8704, expected reward 0.087; 0.1296 without vs 0.7834 with (86%)
    reader = dataclasses.replace(prompt, p_find=(0.4,) * 4, p_read=(0.1,) * 4)
    assert failure_cause(reader, r1) == "generator"
    # curriculum (0.8 judge + 0.2 NDCG): the same prompt expects 0.28 * 0.8704 = 0.244 > 0.2
    assert failure_cause(reader, RUNS["curriculum"]) is None
    # p_find 0.2, p_read 0.1 in round 1: 0.4096 without vs 0.5314 with (56%): no single cause
    mixed = dataclasses.replace(prompt, p_find=(0.2,) * 4, p_read=(0.1,) * 4)
    assert failure_cause(mixed, r1) is None
    assert failure_cause(dataclasses.replace(stuck, wrong_gt_kind="answer"), r1) == "wrong_gt"


def test_the_world_attribution_matches_its_truth_table(tmp_path):
    """The committed world's judged runs, with the world's review sheets as flags."""
    logs = tmp_path / "logs"
    ingest(IngestConfig(sorted((FIXTURES / "logs").glob("*.jsonl")), logs, progress=False))
    flags = sorted((FIXTURES / "reviews").glob("gt_review_*.csv"))
    df, summary = attribute(logs, None, AttributionConfig(flags=flags))
    truth = json.loads((FIXTURES / "truth.json").read_text())
    got = truth_eval.score(df, truth)
    assert got["runs"] == ["curriculum", "focused_r1", "focused_r2"]  # phase1 has no judge
    assert summary["skipped"] == {"phase1": "no judge scores"}
    for cls, v in got["classes"].items():
        print(f"{cls:22s} precision {v['precision']:.3f}  recall {v['recall']:.3f}  {v}")
    c = got["classes"]
    # every planted wrong ground truth that scored low is found; one of three flags is a
    # reviewer's "uncertain" on a retrieval failure (train_213)
    assert c["wrong_gt"]["recall"] == 1.0 and c["wrong_gt"]["precision"] >= 0.6
    assert c["search_failure"]["precision"] >= 0.85 and c["search_failure"]["recall"] >= 0.85
    assert c["generator_bottleneck"]["precision"] == 1.0
    assert c["generator_bottleneck"]["recall"] >= 0.5


@pytest.mark.slow
def test_a_larger_world_attribution_matches_its_truth_table(tmp_path):
    """300 prompts with DDAI's group sizes (8/8/16/16): enough planted cases per class."""
    world = tmp_path / "world"
    make_world(world, seed=0, size=300)
    logs = tmp_path / "logs"
    ingest(IngestConfig(sorted((world / "logs").glob("*.jsonl")), logs, progress=False))
    flags = sorted((world / "reviews").glob("gt_review_*.csv"))
    df, _ = attribute(logs, None, AttributionConfig(flags=flags))
    got = truth_eval.score(df, json.loads((world / "truth.json").read_text()))
    for cls, v in got["classes"].items():
        print(f"{cls:22s} precision {v['precision']:.3f}  recall {v['recall']:.3f}  {v}")
    c = got["classes"]
    assert min(v["planted"] for v in c.values()) >= 10
    assert c["wrong_gt"]["recall"] >= 0.9 and c["wrong_gt"]["precision"] >= 0.75
    assert c["search_failure"]["precision"] >= 0.9 and c["search_failure"]["recall"] >= 0.85
    assert c["generator_bottleneck"]["precision"] >= 0.9
    assert c["generator_bottleneck"]["recall"] >= 0.7
