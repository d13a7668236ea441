"""The explorer's queries over the planted store, against counts worked out by hand.

Planted world (tests/reports/report_world.py). Rewards: ``base`` = judge; ``new`` = 0.8·judge +
0.2·NDCG. GRPO groups (run, step, uid) with one reward for all: base u3 (0 ×4), u4 (1 ×4), new
step 1 u1 (1.0 ×2) and u2 (0 ×2): 12 rollouts; mixed: base u1, u2 and new u3: 10 rollouts.
"""

from __future__ import annotations

import math

import pytest
from report_world import XSS, planted_store

from ddai.pipelines import store
from ddai.pipelines.store import query
from ddai.reports.serve import queries
from ddai.reports.serve.filters import RolloutFilter

PARAMS = {
    "threshold": 1.0,
    "judge_high": 0.5,
    "ndcg_low": 0.0,
    "judge_low": 0.0,
    "ndcg_high": 1.0,
    "max_turns": None,
}


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    logs = planted_store(tmp_path_factory.mktemp("planted"))
    con = query.connect(logs)
    queries.open_explorer(con, PARAMS)
    yield con
    con.close()


def view(**kw) -> RolloutFilter:
    return RolloutFilter(**kw)


@pytest.mark.parametrize(
    ("kw", "n"),
    [
        ({}, 24),
        ({"runs": ("base",)}, 16),
        ({"runs": ("base",), "outcomes": ("success",)}, 8),
        ({"outcomes": ("format_fail",)}, 2),  # base u2/3 (invalid turn), new u2/0 (unfinished)
        ({"outcomes": ("unjudged",)}, 2),  # new u5
        ({"tag": "same_doc_success"}, 2),  # base u1/1, new u3/0
        ({"tag": "zero_search"}, 2),  # base u1/3, u2/1
        ({"terminated": "max_turns"}, 4),  # base u3 (forced)
        ({"group": "zero_variance"}, 12),
        ({"group": "mixed"}, 10),
        ({"ranges": (("judge", 0.5, 0.5),)}, 1),  # base u2/2
        ({"ranges": (("ndcg", 0.5, None), ("judge", None, 0.0))}, 1),  # base u1/2 (retrieval ok)
        ({"ranges": (("step", 2, 2),)}, 4),
        ({"q": "Q C"}, 5),  # "q c" is searched by INVALID (u2/3) and FORCED (u3 ×4)
        ({"q": "alert(1)"}, 1),  # the planted think
        ({"q": "ANSWER U4"}, 3),  # u4/1-3's answer (u4/0's answer is the planted markup)
        ({"uid": "u1", "runs": ("new",)}, 2),
    ],
)
def test_count_matches_the_planted_world(con, kw, n):
    assert queries.count(con, view(**kw)) == n
    assert len(queries.keys(con, view(**kw)).fetchall()) == n


def test_pages_follow_the_sort_and_never_overlap(con):
    first = queries.page(con, view(sort="reward", desc=True, size=10))
    second = queries.page(con, view(sort="reward", desc=True, size=10, page=2))
    third = queries.page(con, view(sort="reward", desc=True, size=10, page=3))
    rows = first + second + third
    assert (len(first), len(second), len(third)) == (10, 10, 4)
    keys = [(r["run_id"], r["uid"], r["step"], r["rollout_idx"]) for r in rows]
    assert len(set(keys)) == 24
    rewards = [r["reward"] for r in rows]
    # 10 rewards of 1.0 (base u1/0-1, u2/0-1, u4 ×4; new u1 ×2), then 0.8, 0.5, …, nulls last
    assert rewards[:10] == [1.0] * 10 and rewards[10] == pytest.approx(0.8) and rewards[11] == 0.5
    assert rewards[-2:] == [None, None]
    assert rewards[:-2] == sorted(rewards[:-2], reverse=True)
    # ties are broken by the rollout key (rid numbers the rows in key order)
    (n_rid,) = con.execute(
        "SELECT count(*) FROM (SELECT rid, row_number() OVER (ORDER BY run_id, uid, step, rollout_idx) AS k FROM explorer) WHERE rid <> k"
    ).fetchall()[0]
    assert n_rid == 0
    assert keys[:4] == [
        ("base", "u1", 1, 0),
        ("base", "u1", 1, 1),
        ("base", "u2", 1, 0),
        ("base", "u2", 1, 1),
    ]


def test_page_rows_carry_the_table_columns(con):
    (row,) = queries.page(con, view(tag="same_doc_success", runs=("base",)))
    assert tuple(row) == queries.TABLE_COLUMNS
    assert (row["uid"], row["rollout_idx"], row["outcome"]) == ("u1", 1, "success")
    assert row["tags"][0] == "same_doc_success" and "hallucination_suspect" in row["tags"]
    assert row["question"] == "What does deck u1 say?" and row["n_search"] == 2


def test_group_puts_a_prompts_rollouts_together_per_run_and_step(con):
    data = queries.group(con, "u1")
    assert data["prompt"]["reference_pages"] == ["1_3"]
    g_base, g_new = data["groups"]
    assert (g_base["run_id"], g_base["step"], g_base["n"]) == ("base", 1, 4)
    assert [r["rollout_idx"] for r in g_base["rollouts"]] == [0, 1, 2, 3]
    # base u1 rewards 1, 1, 0, 0: mean 0.5, population std 0.5; GRPO z-scores ±0.866 (unbiased)
    assert g_base["mean_reward"] == 0.5 and g_base["std_reward"] == 0.5
    assert not g_base["zero_variance"]
    assert [r["advantage_z"] for r in g_base["rollouts"]] == pytest.approx(
        [0.866, 0.866, -0.866, -0.866], abs=1e-3
    )
    # TRL's eps 1e-4 (``ddai.trainer.grpo.advantage``), not verl's 1e-6
    z = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert [r["advantage_z"] for r in g_base["rollouts"]] == pytest.approx(
        [z, z, -z, -z], rel=1e-12
    )
    assert (g_new["run_id"], g_new["n"], g_new["zero_variance"]) == ("new", 2, True)
    assert [r["advantage_z"] for r in g_new["rollouts"]] == [0.0, 0.0]
    assert [a["action"] for a in g_base["rollouts"][2]["actions"]] == ["search"] * 3 + [
        "search_complete"
    ]
    only_new = queries.group(con, "u1", ["new"])
    assert [g["run_id"] for g in only_new["groups"]] == ["new"]
    assert queries.group(con, "nope")["groups"] == []


def test_rollout_is_the_stored_row_with_its_class(con):
    r = queries.rollout(con, "base", "u4", 1, 0)
    assert r is not None and XSS in r["turns"][0]["think"]
    assert r["outcome"] == "success" and r["reference_pages"] == ["4_2"]
    assert queries.rollout(con, "base", "u4", 2, 0) is None
    assert queries.rollout(con, "base", "u4", None, 0) is None


def test_sections_count_what_their_links_filter(con):
    s = queries.sections(con)
    assert [t["run_id"] for t in s["totals"]] == ["base", "new"]
    assert s["totals"][0]["rollouts"] == 16 and s["totals"][0]["prompts"] == 4
    assert s["outcomes"]["base"] == {"success": 8, "failure": 7, "format_fail": 1}
    assert s["groups"][0] == {
        "run_id": "base",
        "groups": 4,
        "zero_variance": 2,
        "zero_variance_rollouts": 8,
        "mixed": 2,
        "mixed_rollouts": 8,
    }
    # every count equals the count of the filter its link carries
    for run, by_tag in s["tags"].items():
        for tag, n in by_tag.items():
            assert queries.count(con, view(runs=(run,), tag=tag)) == n
    for run, by in s["terminated"].items():
        for how, n in by.items():
            if how != "unknown":
                assert queries.count(con, view(runs=(run,), terminated=how)) == n
    # base: u1/1 (same doc), u2/0-1 (no reference doc) are judged right without a golden page
    assert s["suspects"][:2] == [
        {"run_id": "base", "uid": "u2", "n": 2},
        {"run_id": "base", "uid": "u1", "n": 1},
    ]
    assert queries.tags(con)[0] in s["tags"]["base"]


def test_compare_lists_prompts_that_got_better_and_worse(con):
    # base → new: u1 success 0.5 → 1 (better), u2 0.5 → 0 (worse), u3 0 → 0.5 (better)
    d = queries.compare(con, "base", "new")
    assert d["shared"] == 3
    assert [(r["uid"], r["success_delta"]) for r in d["better"]] == [("u1", 0.5), ("u3", 0.5)]
    assert [(r["uid"], r["success_delta"]) for r in d["worse"]] == [("u2", -0.5)]
    assert queries.compare(con, "base", "new", top=1)["better"] == d["better"][:1]


def test_judge_ndcg_grid_cells_are_the_reports_and_filter_their_rollouts(con, tmp_path):
    grid = queries.sections(con)["grid"]
    # the judge grades 0 / 0.5 / 1: charted by its levels; NDCG bands 0, (0, 0.2], …, 1
    assert grid["levels"] == [0.0, 0.5, 1.0] and grid["labels"] == ["0", "0.5", "1"]
    assert grid["bands"][0] == "0" and grid["bands"][6] == "1"
    # base by hand: judge 1 with NDCG 1 (u1/0, u4 ×4), judge 1 with NDCG 0 (u1/1, u2/0-1),
    # judge 0 with NDCG 1 (u1/2) and 0 (u1/3, u3 ×4), u2/2 (0.5, 0.613 → (0.6, 0.8]),
    # u2/3 (0, 0.387 → (0.2, 0.4])
    assert grid["cells"]["base"] == {
        (1.0, 6): 5,
        (1.0, 0): 3,
        (0.0, 6): 1,
        (0.0, 0): 5,
        (0.5, 4): 1,
        (0.0, 2): 1,
    }
    # the same cells as the report's own grid SQL, and each cell's link filters exactly its rows
    report = query.connect(planted_store(tmp_path))
    sql = query.sql_text("report_facts")
    report.execute(sql, {k: v for k, v in PARAMS.items() if f"${k}" in sql})
    rows = report.execute(query.sql_text("report_judge_ndcg_grid"), {"judge_bins": 0}).fetchall()
    assert {(r, j, b): n for r, j, b, n in rows} == {
        (run, j, b): n for run, by in grid["cells"].items() for (j, b), n in by.items()
    }
    for run, by in grid["cells"].items():
        for (level, band), n in by.items():
            v = RolloutFilter.from_params(
                {"run": [run], "judge_level": [str(level)], "ndcg_band": [str(band)]}
            )
            assert queries.count(con, v) == n


def test_score_bands_count_prompts_and_link_their_rollouts(con):
    bands = queries.sections(con)["bands"]
    assert bands["bands"] == ["=0", "(0, 0.3]", "(0.3, 0.5]", "(0.5, 0.7]", "(0.7, 1)", "=1"]
    # base (reward = judge): u1 mean 0.5, u2 0.625, u3 0, u4 1; new: u1 1, u2 0, u3 0.4, u5 none
    assert bands["cells"]["base"] == {
        0: {"prompts": 1, "rollouts": 4},
        2: {"prompts": 1, "rollouts": 4},
        3: {"prompts": 1, "rollouts": 4},
        5: {"prompts": 1, "rollouts": 4},
    }
    assert bands["cells"]["new"] == {
        0: {"prompts": 1, "rollouts": 2},
        2: {"prompts": 1, "rollouts": 2},
        5: {"prompts": 1, "rollouts": 2},
    }
    rows = queries.page(con, view(runs=("base",), score_band=3))
    assert {r["uid"] for r in rows} == {"u2"} and len(rows) == 4
    assert queries.count(con, view(runs=("new",), score_band=2)) == 2
    assert queries.count(con, view(score_band=1)) == 0


def test_neighbours_follow_the_views_order(con):
    base = view(runs=("base",))
    near = queries.neighbours(con, base, "base", "u2", 1, 0)
    assert (near["pos"], near["total"]) == (5, 16)
    assert near["prev"] == {"run_id": "base", "uid": "u1", "step": 1, "idx": 3}
    assert near["next"] == {"run_id": "base", "uid": "u2", "step": 1, "idx": 1}
    first = queries.neighbours(con, base, "base", "u1", 1, 0)
    assert first["prev"] is None and first["pos"] == 1
    last = queries.neighbours(con, base, "base", "u4", 1, 3)
    assert last["next"] is None and last["pos"] == 16
    # sorted by reward, highest first: the order the table shows (ties by the rollout key)
    by_reward = view(runs=("base",), sort="reward", desc=True)
    near = queries.neighbours(con, by_reward, "base", "u2", 1, 2)  # reward 0.5: after the 1.0s
    assert near["pos"] == 9 and near["prev"]["uid"] == "u4" and near["prev"]["idx"] == 3
    assert near["next"] == {"run_id": "base", "uid": "u1", "step": 1, "idx": 2}
    # a rollout the view does not match has no place in it; a step-less key finds its step
    assert queries.neighbours(con, view(runs=("new",)), "base", "u2", 1, 0) is None
    assert queries.steps_of(con, "base", "u2", 0) == [1]
    assert queries.steps_of(con, "base", "u9", 0) == []


def test_success_rate_is_over_judged_rollouts_and_unknown_without_one(tmp_path):
    # run new: u5's 2 rollouts are unjudged; 3 of the 6 judged succeed (u1 ×2, u3/0)
    logs = planted_store(tmp_path)
    store.write_run(logs, "unjudged", [{"uid": "x", "rollout_idx": i} for i in range(3)])
    con = query.connect(logs)
    queries.open_explorer(con, PARAMS)
    try:
        rates = {t["run_id"]: t["success_rate"] for t in queries.sections(con)["totals"]}
    finally:
        con.close()
    assert rates == {"base": 0.5, "new": 0.5, "unjudged": None}


def test_grpo_groups_are_the_reports_groups_scored_by_reward_else_judge(tmp_path):
    # a judge-only log (no reward column): the report scores its groups by the judge, so the
    # explorer must too. Groups: g1 judge 1, 1 (zero variance), g2 0, 1 (mixed), g3 one rollout,
    # g4 two unjudged rollouts: the report's 2 groups of two or more scored rollouts.
    rows = [
        {"uid": uid, "rollout_idx": i, "judge_score": j}
        for uid, judges in (
            ("g1", [1.0, 1.0]),
            ("g2", [0.0, 1.0]),
            ("g3", [1.0]),
            ("g4", [None, None]),
        )
        for i, j in enumerate(judges)
    ]
    logs = tmp_path / "logs"
    store.write_run(logs, "judged", rows)
    con = query.connect(logs)
    queries.open_explorer(con, PARAMS)
    try:
        groups = queries.sections(con)["groups"]
        zero = queries.count(con, view(group="zero_variance"))
        mixed = queries.count(con, view(group="mixed"))
        page = queries.group(con, "g1")["groups"][0]
    finally:
        con.close()
    assert groups == [
        {
            "run_id": "judged",
            "groups": 2,
            "zero_variance": 1,
            "zero_variance_rollouts": 2,
            "mixed": 1,
            "mixed_rollouts": 2,
        }
    ]
    assert (zero, mixed) == (2, 2)
    assert page["zero_variance"]
