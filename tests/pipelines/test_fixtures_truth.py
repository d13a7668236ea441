"""``fixtures/truth.json`` agrees with the logs, the reviews and the prompt set it describes.

The funnel is re-derived here with polars from the logs and review sheets alone, as a user of the
tool would, and must give the generator's lists back.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import SHARED

from ddai.pipelines.fixtures import SEARCHER_SYSTEM_PROMPT
from ddai.pipelines.pages.corpus import Corpus

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "fixtures"
RUNS = ("phase1", "curriculum", "focused_r1", "focused_r2")


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((FIXTURES / "truth.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def logs() -> dict[str, pl.DataFrame]:
    cols = ["step", "uid", "rollout_idx", "judge_score", "ndcg", "format_ok", "reward"]
    return {
        run: pl.read_ndjson(FIXTURES / "logs" / f"{run}.jsonl", infer_schema_length=None).select(
            cols
        )
        for run in RUNS
    }


@pytest.fixture(scope="module")
def dataset_order() -> list[str]:
    return pq.read_table(FIXTURES / "dataset.parquet", columns=["id"]).column("id").to_pylist()


def read_review(name: str) -> list[dict[str, str]]:
    with open(FIXTURES / "reviews" / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def prompt_stats(df: pl.DataFrame) -> pl.DataFrame:
    success = (pl.col("judge_score").fill_null(0.0) >= 1.0) & pl.col("format_ok")
    return df.group_by("uid", maintain_order=True).agg(
        n=pl.len(),
        n_success=success.sum(),
        mean_ndcg=pl.col("ndcg").mean(),
        mean_reward=pl.col("reward").mean(),
        phase1_score=pl.when(pl.col("format_ok")).then(pl.col("ndcg")).otherwise(0.0).mean(),
    )


def test_per_prompt_stats_match_the_logs(logs, truth):
    for run in RUNS:
        recorded = truth["runs"][run]["prompts"]
        stats = prompt_stats(logs[run])
        assert set(stats["uid"]) == set(recorded)
        assert truth["runs"][run]["n_rollouts"] == logs[run].height
        for row in stats.iter_rows(named=True):
            t = recorded[row["uid"]]
            assert (t["n"], t["n_success"]) == (row["n"], row["n_success"])
            assert t["success_rate"] == pytest.approx(row["n_success"] / row["n"], abs=1e-12)
            for k in ("mean_ndcg", "mean_reward", "phase1_score"):
                assert t[k] == pytest.approx(row[k], abs=1e-12), (run, row["uid"], k)


def test_funnel_re_derived_from_logs_and_reviews(logs, truth, dataset_order):
    position = {u: i for i, u in enumerate(dataset_order)}

    def ranked(scores: dict[str, float]) -> list[str]:
        # score descending, ties in dataset order
        return sorted(scores, key=lambda u: (-scores[u], position[u]))

    def means(run: str, col: str) -> dict[str, float]:
        return dict(prompt_stats(logs[run]).select("uid", col).iter_rows())

    p1 = means("phase1", "phase1_score")
    order = ranked(p1)
    bucket_a = [u for u in order if 0.1 <= p1[u] <= 0.7]
    bucket_b = [u for u in order if p1[u] > 0.7]
    bucket_0 = [u for u in order if p1[u] < 0.1]
    cur = means("curriculum", "mean_reward")
    hard_a = [u for u in bucket_a if cur[u] <= 0.2]
    flagged0 = {r["uid"] for r in read_review("gt_review_bucket0.csv")}
    round1 = hard_a + [u for u in bucket_0 if u not in flagged0]
    r1 = means("focused_r1", "mean_reward")
    low1 = [u for u in round1 if r1[u] <= 0.3]
    flagged1 = {r["uid"] for r in read_review("gt_review_round1.csv")}
    round2 = [u for u in low1 if u not in flagged1]

    f = truth["funnel"]
    assert f["buckets"] == {"B": bucket_b, "A": bucket_a, "0": bucket_0}
    assert (f["hard_a"], f["round1"], f["round1_low"], f["round2"]) == (
        hard_a,
        round1,
        low1,
        round2,
    )
    # Each run played exactly the prompts the funnel sent it.
    for run, uids in (("curriculum", bucket_a), ("focused_r1", round1), ("focused_r2", round2)):
        assert set(logs[run]["uid"]) == set(uids)
    # Every stage is exercised in the committed world.
    assert all(len(v) >= 2 for v in (bucket_a, bucket_b, bucket_0, hard_a, low1, round2))
    assert len(round1) > len(hard_a) and len(round2) < len(low1)
    counts = f["counts"]
    assert counts["round1"] == len(round1) and counts["bucket0_flagged"] == len(flagged0)


def test_reviews_are_a_person_s_decisions_in_ddai_s_format(truth):
    for name, reviewed, verdicts in (
        ("gt_review_bucket0.csv", truth["funnel"]["buckets"]["0"], {"wrong"}),
        ("gt_review_round1.csv", truth["funnel"]["round1_low"], {"wrong", "uncertain"}),
    ):
        raw = (FIXTURES / "reviews" / name).read_bytes()
        assert raw.startswith(b"uid,verdict,reason\r\n")  # csv module's dialect, as DDAI's
        rows = read_review(name)
        assert rows and {r["verdict"] for r in rows} == verdicts
        assert {r["uid"] for r in rows} <= set(reviewed)
        assert all(r["reason"] for r in rows)
    # Every planted wrong ground truth a review saw is flagged as wrong.
    wrong = set(truth["planted"]["wrong_gt"])
    for name, reviewed in (
        ("gt_review_bucket0.csv", truth["funnel"]["buckets"]["0"]),
        ("gt_review_round1.csv", truth["funnel"]["round1_low"]),
    ):
        flagged = {r["uid"] for r in read_review(name) if r["verdict"] == "wrong"}
        assert flagged == wrong & set(reviewed)


def test_planted_wrong_ground_truths_disagree_with_the_pages(truth):
    corpus = Corpus.load(FIXTURES)
    prompts = {p["uid"]: p for p in truth["prompts"]}
    kinds = {
        "page": truth["planted"]["wrong_gt_page"],
        "answer": truth["planted"]["wrong_gt_answer"],
    }
    assert len(kinds["page"]) >= 2 and len(kinds["answer"]) >= 2
    for uid, p in prompts.items():
        assert p["wrong_gt"] == (uid in kinds["page"] or uid in kinds["answer"])
        if len(p["true_pages"]) == 1:
            assert p["true_answer"] in corpus.text(p["true_pages"][0])
    for uid in kinds["page"]:
        p = prompts[uid]
        assert p["reference_pages"] != p["true_pages"]
        assert p["reference_answer"] == p["true_answer"]
        assert uid in truth["funnel"]["buckets"]["0"]  # nobody can retrieve a wrong reference page
    for uid in kinds["answer"]:
        p = prompts[uid]
        assert p["reference_pages"] == p["true_pages"] and p["reference_answer"] != p["true_answer"]


def test_dataset_is_verl_rl_parquet_like_ddai_s(truth):
    ours = pq.read_table(FIXTURES / "dataset.parquet")
    real = pq.read_table(SHARED / "ddai-data" / "slidevqa_train_6667.parquet")
    assert ours.schema.remove_metadata().equals(real.schema.remove_metadata())
    real_system = real.slice(0, 1).to_pylist()[0]["prompt"][0]["content"]
    assert real_system == SEARCHER_SYSTEM_PROMPT
    rows = ours.to_pylist()
    assert [r["id"] for r in rows] == [p["uid"] for p in truth["prompts"]]
    for i, r in enumerate(rows):
        assert r["id"] == "train_" + r["file_name"].removesuffix(".pdf")
        assert r["extra_info"]["index"] == i
        assert r["prompt"][1] == {
            "content": f"Question: {r['extra_info']['question']}",
            "role": "user",
        }
        assert r["reward_model"] == {"ground_truth": r["extra_info"]["answer"], "style": "rule"}
        assert r["reference_page"] == r["extra_info"]["reference_page"]


def test_generator_parameters_are_recorded(truth):
    g = truth["generator"]
    assert (g["seed"], g["size"], g["n_prompts"]) == (0, "small", len(truth["prompts"]))
    assert g["n_pages"] == len(Corpus.load(FIXTURES))
