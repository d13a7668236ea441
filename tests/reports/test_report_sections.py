"""Every section's numbers on the planted world (see report_world.py for the table of cases)."""

from __future__ import annotations

import pytest
from test_report_page import built as built  # its fixtures, shared
from test_report_page import logs as logs

from ddai.pipelines.store import query
from ddai.reports import ReportConfig, build_report


@pytest.fixture(scope="module")
def report(built):
    return built[0]  # test_report_page's report of the planted world, base vs new


def _stats(logs, tmp_path, **kw):
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False, browse_max=0, **kw)
    return build_report(cfg)["stats"]


def test_sections_in_order(report):
    core = [
        "overview",
        "funnel",
        "outcomes",
        "judge-ndcg",
        "hallucination",
        "behaviour",
        "compare",
        "browser",
    ]
    assert [s for s in report["sections"] if s in core] == core  # others may be plugged in


def test_overview(report):
    ov = report["stats"]["overview"]
    base, new = ov["runs"]
    # base: 8 successes of 16 judged (u1/0, u1/1, u2/0, u2/1, u4 × 4); u3's 4 forced completions
    # end at max_turns; 16 × 0.01 USD
    assert (base["run_id"], base["rollouts"], base["prompts"], base["steps"]) == ("base", 16, 4, 1)
    assert (base["judged"], base["successes"], base["success_rate"]) == (16, 8, 0.5)
    assert (base["complete"], base["max_turns"], base["invalid"], base["error"]) == (12, 4, 0, 0)
    assert base["format_fail"] == 1
    assert base["cost_usd"] == pytest.approx(0.16, abs=1e-12)
    # new: u5 unjudged, so 6 judged with 3 successes (u1 × 2, u3/0); u2/0 never completes
    # (invalid), u2/1 logged an error; no cost anywhere
    assert (new["rollouts"], new["prompts"], new["steps"], new["judged"]) == (8, 4, 2, 6)
    assert (new["successes"], new["invalid"], new["error"], new["complete"]) == (3, 1, 1, 6)
    assert new["cost_usd"] is None
    # mean judge of base: (8 × 1 + 0.5) / 16
    assert base["mean_judge"] == pytest.approx(8.5 / 16, abs=1e-12)
    total = ov["total"]
    assert (total["rollouts"], total["prompts"], total["successes"], total["judged"]) == (
        24,
        5,
        11,
        22,
    )


def test_per_prompt_outcomes(report):
    out = report["stats"]["outcomes"]
    # base: u3 0/4, u1 2/4, u2 2/4 (u2/3 failed the format gate), u4 4/4
    assert out["success_hist"]["base"] == {"0.0": 1, "0.5": 2, "1.0": 1}
    # new: u2 0/2, u3 1/2, u1 2/2; u5 has no judged rollout
    assert out["success_hist"]["new"] == {"0.0": 1, "0.5": 1, "1.0": 1}
    # mean reward: base u1 0.5, u2 (1 + 1 + 0.5 + 0) / 4 = 0.625, u3 0, u4 1;
    # new u1 1, u2 0, u3 (0.8 + 0) / 2 = 0.4
    assert out["bands"]["base"] == {
        "=0": 1,
        "(0, 0.3]": 0,
        "(0.3, 0.5]": 1,
        "(0.5, 0.7]": 1,
        "(0.7, 1)": 0,
        "=1": 1,
    }
    assert out["bands"]["new"]["=1"] == 1 and out["bands"]["new"]["(0.3, 0.5]"] == 1
    # zero variance: base u3 (all 0) and u4 (all 1) of 4 groups; new step 1 u1 (1, 1) and u2
    # (0, 0), step 2 u3 (0.8, 0) varies and u5 has no score
    by_step = {(r["run_id"], r["step"]): r for r in out["zero_variance_by_step"]}
    assert {k: (r["groups"], r["zero_variance"], r["all_zero"]) for k, r in by_step.items()} == {
        ("base", 1): (4, 2, 1),
        ("new", 1): (2, 2, 1),
        ("new", 2): (1, 0, 0),
    }
    assert out["zero_variance"]["new"]["share"] == pytest.approx(2 / 3)


def test_judge_vs_ndcg_matches_the_discrepancies_view(report, logs):
    disc = report["stats"]["judge-ndcg"]["discrepancies"]
    want = {c: 0 for c in ("same_doc_success", "no_reference_doc", "retrieval_ok_answer_wrong")}
    assert {k: disc["base"][k] for k in want} == {
        "same_doc_success": 1,  # u1/1 retrieved 1_5, the reference is 1_3
        "no_reference_doc": 2,  # u2/0 (7_1) and u2/1 (nothing)
        "retrieval_ok_answer_wrong": 1,  # u1/2
    }
    assert {k: disc["new"][k] for k in want} == {**want, "same_doc_success": 1}  # u3/0 (3_9)
    # the query layer's view (same default thresholds) counts the same, independently
    con = query.connect(logs)
    rows = con.execute("SELECT run_id, class, count(*) FROM discrepancies GROUP BY ALL").fetchall()
    for run, cls, n in rows:
        assert disc[run][cls] == n
    assert sum(n for *_, n in rows) == sum(disc[r][c] for r in disc for c in want)


def test_thresholds_are_flags(logs, tmp_path):
    # NDCG ≤ 0.7 now counts as "no golden page": u2/2 (judge 0.5, NDCG 0.613, retrieved 2_2 of
    # the reference document) joins same_doc_success; NDCG ≥ 0.3 counts as "retrieval
    # succeeded": u2/3 (judge 0, NDCG 0.387) joins retrieval_ok_answer_wrong
    st = _stats(logs, tmp_path, ndcg_low=0.7, ndcg_high=0.3, judge_low=0.0)
    base = st["judge-ndcg"]["discrepancies"]["base"]
    assert (base["same_doc_success"], base["retrieval_ok_answer_wrong"]) == (2, 2)
    # judge ≥ 1 for "correct": u2/2 (0.5) is no longer a correct answer anywhere
    st = _stats(logs, tmp_path, judge_high=1.0)
    assert st["hallucination"]["runs"]["base"]["correct"] == 8


def test_success_threshold_flag(logs, tmp_path):
    # at 0.5, u2/2 (judge 0.5, format ok) succeeds too; u2/3 still fails the format gate
    st = _stats(logs, tmp_path, success_threshold=0.5)
    assert st["overview"]["runs"][0]["successes"] == 9
    assert st["outcomes"]["success_hist"]["base"] == {"0.0": 1, "0.5": 1, "0.75": 1, "1.0": 1}


def test_hallucination_suspects(report):
    h = report["stats"]["hallucination"]
    base = h["runs"]["base"]
    # correct with reference pages: u1/0, u1/1, u2/0, u2/1, u2/2, u4 × 4 = 9; suspects: u1/1
    # (same document), u2/0, u2/1; u2/2 retrieved the golden 2_2
    assert (base["judged"], base["correct"], base["suspects"], base["suspects_same_doc"]) == (
        16,
        9,
        3,
        1,
    )
    assert base["share_of_judged"] == pytest.approx(3 / 16)
    assert h["runs"]["new"]["suspects"] == 1 and h["runs"]["new"]["suspects_same_doc"] == 1
    # ranked: most suspects first, then the higher share
    assert [(r["run_id"], r["uid"], r["suspects"]) for r in h["ranked"]] == [
        ("base", "u2", 2),
        ("new", "u3", 1),  # 1 of 2 rollouts
        ("base", "u1", 1),  # 1 of 4
    ]


def test_search_behaviour(report):
    b = report["stats"]["behaviour"]["runs"]["base"]
    # searches: u1 2+2+3+0, u2 2+0+2+1, u3 3 × 4, u4 1 × 4 = 28 over 16 rollouts
    assert b["mean_search"] == pytest.approx(28 / 16)
    assert b["mean_bbox"] == pytest.approx(4 / 16)
    assert (b["zero_search"], b["duplicate_query"], b["consecutive_repeat"]) == (2, 2, 1)
    # turns: TWO 3, DUP 4, ZERO 1, CONSEC 3, INVALID 3, FORCED 4, BBOX 3 → 49; one invalid turn
    assert (b["invalid_turns"], b["turns"], b["invalid_rollouts"]) == (1, 49, 1)
    # max_turns 4 from extra: DUP (4 turns) and the four FORCED rollouts use every turn
    assert (b["max_turns"], b["at_max_turns"], b["forced"]) == (4, 5, 4)
    new = report["stats"]["behaviour"]["runs"]["new"]
    assert new["max_turns"] is None and new["at_max_turns_share"] is None
    # first golden page: rank 1 for u1/0, u1/2, u2/2 and u4 × 4; rank 2 for u2/3 (7_1, 2_1)
    assert report["stats"]["behaviour"]["golden_rank"]["base"] == {"1": 7, "2": 1, "none": 8}


def test_max_turns_flag_overrides_extra(logs, tmp_path):
    b = _stats(logs, tmp_path, max_turns=3)["behaviour"]["runs"]
    # ≥ 3 turns: everything in base but the two ZERO rollouts; in new all but UNFINISHED u2/0
    assert (b["base"]["max_turns"], b["base"]["at_max_turns"]) == (3, 14)
    assert (b["new"]["max_turns"], b["new"]["at_max_turns"]) == (3, 7)


def test_run_comparison(report):
    c = report["stats"]["compare"]
    assert c["compared"] == ["base", "new"]
    # success rate per prompt: u1 0.5 → 1, u2 0.5 → 0, u3 0 → 0.5; u4 and u5 are in one run only
    assert c["prompts"] == {"common": 3, "better": 2, "worse": 1, "same": 0}
    assert c["better"] == ["u1", "u3"] and c["worse"] == ["u2"]
    assert c["shift"]["mean_search"] == {"a": pytest.approx(1.75), "b": pytest.approx(15 / 8)}
    assert c["shift"]["zero_search_share"] == {"a": pytest.approx(2 / 16), "b": 0.0}


def test_compare_absent_leaves_a_note(logs, tmp_path):
    assert _stats(logs, tmp_path)["compare"] == {"compared": None}


def test_trajectory_browser(report):
    br = report["stats"]["browser"]
    assert (br["shown"], br["rollouts"]) == (24, 24)
    assert br["outcomes"] == {"success": 11, "failure": 9, "format_fail": 2, "unjudged": 2}
    assert br["tags"] == {
        "same_doc_success": 2,
        "no_reference_doc": 2,
        "retrieval_ok_answer_wrong": 1,
        "hallucination_suspect": 4,
        "invalid_action": 1,
        "forced_completion": 4,
        "zero_search": 2,
        "repeated_query": 2,
    }
