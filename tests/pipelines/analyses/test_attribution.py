"""The failure-attribution view and its summary on the hand-planted store (analysis_world)."""

from __future__ import annotations

import pytest
from analysis_world import planted_store

from ddai.pipelines import store
from ddai.pipelines.analyses import AttributionConfig, MissingData, attribute
from ddai.pipelines.store import query


@pytest.fixture
def planted(tmp_path):
    return planted_store(tmp_path)


def _by_uid(df):
    return {r["uid"]: r for r in df.to_dicts()}


def test_each_planted_prompt_gets_its_class_and_reason(planted):
    logs, flags = planted
    df, summary = attribute(logs, None, AttributionConfig(flags=[flags]))
    got = _by_uid(df)
    expected = {
        "p1": ("search_failure", "failures_without_golden_page"),
        "p2": ("generator_bottleneck", "failures_with_golden_page"),
        "p3": ("wrong_gt", "agreed_rejected_answer"),
        "p4": ("generator_bottleneck", "failures_with_golden_page"),
        "p5": ("wrong_gt", "review_uncertain"),
        "p6": (None, None),
        "p7": ("search_failure", "failures_without_golden_page"),
        "p8": (None, None),
    }
    assert {u: (r["class"], r["reason"]) for u, r in got.items()} == expected
    # p3's answers "42." and "42 " agree once trimmed; p4's refusals never count as agreement
    assert (got["p3"]["agreed"], got["p3"]["agreed_answer"]) == (4, "42")
    assert got["p4"]["agreed"] == 0
    # p2: 3 golden rollouts rejected, the unjudged one counts in neither
    assert (got["p2"]["golden_rejected"], got["p2"]["failed_without_golden"]) == (3, 0)
    assert got["p7"]["mean_score"] == pytest.approx(0.25)
    assert got["p6"]["low"] is False and got["p6"]["review_verdict"] is None  # "ok" flags nothing
    run = summary["runs"]["r"]
    assert run["low"] == 6
    assert run["counts"] == {"wrong_gt": 2, "generator_bottleneck": 2, "search_failure": 2}
    assert run["prompts_by_class"]["wrong_gt"] == ["p3", "p5"]
    assert summary["flags loaded"] == 1


def test_without_flags_the_review_case_is_a_search_failure(planted):
    logs, _ = planted
    df, _ = attribute(logs, None, AttributionConfig())
    assert _by_uid(df)["p5"]["class"] == "search_failure"


def test_thresholds_move_the_line(planted):
    logs, _ = planted
    df, _ = attribute(logs, None, AttributionConfig(score_max=0.2, agree_min=5))
    got = _by_uid(df)
    assert got["p7"]["class"] is None  # 0.25 is over 0.2
    assert got["p3"]["class"] == "generator_bottleneck"  # 4 agreeing answers < 5


def test_a_run_without_judge_scores_is_named_with_the_fix(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(
        logs,
        "flashless",
        [{"uid": "u", "rollout_idx": i, "reward": 0.5, "ndcg": 0.5} for i in range(2)],
    )
    with pytest.raises(
        MissingData, match=r"run flashless has no judge scores.*score the run with a judge"
    ):
        attribute(logs, ["flashless"], AttributionConfig())


def test_unnamed_runs_lacking_inputs_are_skipped_and_reported(planted, tmp_path):
    logs, _ = planted
    store.write_run(logs, "nojudge", [{"uid": "u", "rollout_idx": 0, "reward": 0.1}])
    df, summary = attribute(logs, None, AttributionConfig())
    assert set(df["run_id"].to_list()) == {"r"}
    assert summary["skipped"] == {"nojudge": "no judge scores, no retrieved and reference pages"}


def test_bad_thresholds_are_refused():
    with pytest.raises(ValueError, match="--agree-min"):
        AttributionConfig(agree_min=1)
    with pytest.raises(ValueError, match="--score-max"):
        AttributionConfig(score_max=1.5)


def test_the_views_answer_plain_queries(planted):
    """``ddai query`` sees the views with their defaults (no flags loaded: p5 is a search failure)."""
    logs, _ = planted
    con = query.connect(logs)
    got = dict(
        con.sql("SELECT class, count(*) FROM failure_attribution WHERE low GROUP BY 1").fetchall()
    )
    assert got == {"search_failure": 3, "generator_bottleneck": 2, "wrong_gt": 1}
    assert con.sql("SELECT count(*) FROM zero_variance_groups").fetchall() == [(6,)]
    assert con.sql("SELECT sum(timeouts) FROM reward_latency").fetchall() == [(1,)]
