"""Every section's counts on a seeded random world, recomputed independently in the test: plain
SQL over the stored rows, or Python over them with the project's metric functions."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise

import duckdb
import pytest
from report_world import browser_rows, random_store
from support.golden_rank import first_golden_rank

from ddai.pipelines import store
from ddai.pipelines.records import metrics
from ddai.reports import ReportConfig, build_report

THRESHOLD = 1.0


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("random")
    logs = random_store(root)
    cfg = ReportConfig(
        logs=logs, out=root / "r.html", progress=False, browse_max=50, compare=("run0", "run1")
    )
    rows = store.read_rollouts(logs)
    con = duckdb.connect()
    con.register("r", rows)
    stats = build_report(cfg)["stats"]
    stats["__html__"] = cfg.out.read_text(encoding="utf-8")
    return rows.to_pylist(), con, stats


def _success(r) -> bool:
    return (
        r["judge_score"] is not None
        and r["judge_score"] >= THRESHOLD
        and r["format_ok"] is not False
    )


def test_overview_counts(world):
    _, con, stats = world
    want = con.execute(
        """SELECT run_id, count(*), count(DISTINCT uid), count(judge_score),
                  count(*) FILTER (WHERE judge_score >= 1 AND format_ok IS NOT false),
                  avg(judge_score), avg(ndcg),
                  count(*) FILTER (WHERE terminated = 'max_turns')
           FROM r GROUP BY run_id ORDER BY run_id"""
    ).fetchall()
    got = [
        (
            x["run_id"],
            x["rollouts"],
            x["prompts"],
            x["judged"],
            x["successes"],
            pytest.approx(x["mean_judge"], abs=1e-12),
            pytest.approx(x["mean_ndcg"], abs=1e-12),
            x["max_turns"],
        )
        for x in stats["overview"]["runs"]
    ]
    assert got == want


def test_success_histogram_and_zero_variance(world):
    _, con, stats = world
    hist = con.execute(
        """WITH p AS (
             SELECT run_id, uid,
                    count(*) FILTER (WHERE judge_score >= 1 AND format_ok IS NOT false)
                      / count(judge_score) AS rate
             FROM r GROUP BY ALL HAVING count(judge_score) > 0)
           SELECT run_id, rate, count(*) FROM p GROUP BY ALL"""
    ).fetchall()
    want: dict[str, dict[float, int]] = defaultdict(dict)
    for run, rate, n in hist:
        want[run][round(rate, 6)] = n
    got = {
        run: {float(k): v for k, v in c.items()}
        for run, c in stats["outcomes"]["success_hist"].items()
    }
    assert got == want
    zv = con.execute(
        """WITH g AS (
             SELECT run_id, step, uid, count(coalesce(reward, judge_score)) AS n,
                    var_pop(coalesce(reward, judge_score)) AS v
             FROM r GROUP BY ALL)
           SELECT run_id, step, count(*) FILTER (WHERE n >= 2),
                  count(*) FILTER (WHERE n >= 2 AND v < 1e-12)
           FROM g GROUP BY ALL ORDER BY ALL"""
    ).fetchall()
    got_zv = [
        (x["run_id"], x["step"], x["groups"], x["zero_variance"])
        for x in stats["outcomes"]["zero_variance_by_step"]
    ]
    assert got_zv == zv


def test_discrepancies_and_hallucination_suspects(world):
    rows, _, stats = world
    disc: dict[str, Counter[str]] = defaultdict(Counter)
    suspects: Counter[str] = Counter()
    for x in rows:
        j, n, ref = x["judge_score"], x["ndcg"], x["reference_pages"] or []
        ret = x["retrieved_pages"] or []
        same_doc = bool({metrics.doc_of(p) for p in ret} & {metrics.doc_of(p) for p in ref})
        if j is None or n is None:
            continue
        if j >= 0.5 and n == 0:
            disc[x["run_id"]]["same_doc_success" if same_doc else "no_reference_doc"] += 1
        elif j == 0 and n == 1:
            disc[x["run_id"]]["retrieval_ok_answer_wrong"] += 1
        if j >= 0.5 and ref and not set(ret) & set(ref):
            suspects[x["run_id"]] += 1
    for run, per in stats["judge-ndcg"]["discrepancies"].items():
        assert {k: per[k] for k in disc[run]} == disc[run]
        assert sum(per[k] for k in disc[run]) == sum(disc[run].values())
    assert {run: h["suspects"] for run, h in stats["hallucination"]["runs"].items()} == suspects
    assert sum(suspects.values()) > 0 and all(sum(c.values()) > 0 for c in disc.values())


def test_search_behaviour(world):
    rows, _, stats = world
    want: dict[str, Counter[str]] = defaultdict(Counter)
    ranks: dict[str, Counter[str]] = defaultdict(Counter)
    for x in rows:
        c = want[x["run_id"]]
        queries = [t["arg"].strip().lower() for t in x["turns"] if t["action"] == "search"]
        c["rollouts"] += 1
        c["searches"] += len(queries)
        c["bbox"] += sum(t["action"] == "bbox" for t in x["turns"])
        c["zero_search"] += not queries
        c["duplicate_query"] += len(set(queries)) < len(queries)
        c["consecutive_repeat"] += any(a == b for a, b in pairwise(queries))
        c["invalid_turns"] += sum(t["action"] == "invalid" for t in x["turns"])
        c["turns"] += len(x["turns"])
        c["at_max_turns"] += x["num_turns"] >= 4
        rank = first_golden_rank(x["retrieved_pages"] or [], x["reference_pages"])
        ranks[x["run_id"]][str(rank) if rank else "none"] += 1
    for run, b in stats["behaviour"]["runs"].items():
        c = want[run]
        assert b["mean_search"] == pytest.approx(c["searches"] / c["rollouts"], abs=1e-12)
        assert b["mean_bbox"] == pytest.approx(c["bbox"] / c["rollouts"], abs=1e-12)
        for key in ("zero_search", "duplicate_query", "consecutive_repeat", "invalid_turns"):
            assert b[key] == c[key], key
        assert (b["turns"], b["at_max_turns"], b["max_turns"]) == (c["turns"], c["at_max_turns"], 4)
    assert stats["behaviour"]["golden_rank"] == ranks


def test_run_comparison(world):
    rows, _, stats = world
    rate: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for x in rows:
        if x["judge_score"] is not None:
            rate[x["run_id"], x["uid"]][0] += _success(x)
            rate[x["run_id"], x["uid"]][1] += 1
    better = worse = same = 0
    for uid in {u for _, u in rate}:
        a, b = rate.get(("run0", uid)), rate.get(("run1", uid))
        if a and b:
            d = b[0] / b[1] - a[0] / a[1]
            better, worse, same = better + (d > 0), worse + (d < 0), same + (d == 0)
    assert stats["compare"]["prompts"] == {
        "common": better + worse + same,
        "better": better,
        "worse": worse,
        "same": same,
    }


def test_browser_sample_covers_every_run_and_outcome(world):
    rows, _, stats = world
    html = stats["__html__"]
    shown = {(r["run_id"], r["outcome"]) for r in browser_rows(html)}
    present = set()
    for x in rows:
        if x["format_ok"] is False:
            outcome = "format_fail"
        elif x["judge_score"] is None:
            outcome = "unjudged"
        else:
            outcome = "success" if _success(x) else "failure"
        present.add((x["run_id"], outcome))
    # 50 slots and 12 (run, outcome) pairs: the round-robin reaches every pair
    assert len(present) == 12 and shown == present
    assert (stats["browser"]["shown"], stats["browser"]["rollouts"]) == (50, len(rows))
