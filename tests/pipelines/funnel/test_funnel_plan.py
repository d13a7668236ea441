"""``curate plan``: closed forms against hand values and Monte-Carlo simulation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from support.funnel_data import group, write_dataset, write_log
from support.plan_reference import mixed_prob, simulate_mixed_share

from ddai.pipelines.funnel import plan


def test_mixed_prob_hand_values():
    # p = 0.5, n = 2: 1 - 0.25 - 0.25 = 0.5
    # p = 0.1, n = 8: 1 - 0.1^8 - 0.9^8 = 1 - 1e-8 - 0.43046721 = 0.56953278
    # p = 0 or 1: never mixed
    got = mixed_prob(np.array([0.5, 0.1, 0.0, 1.0]), 2)
    assert got[0] == pytest.approx(0.5, abs=1e-15)
    assert mixed_prob(np.array([0.1]), 8)[0] == pytest.approx(0.56953278, abs=1e-12)
    assert got[2] == 0.0 and got[3] == 0.0


def test_beta_binomial_pmf_hand_values():
    # Beta(1, 1) is uniform, so K ~ BetaBinomial(n, 1, 1) is uniform on 0..n.
    pmf = plan.beta_binomial_pmf(np.array([1.0]), np.array([1.0]), 4)
    np.testing.assert_allclose(pmf[0], np.full(5, 0.2), rtol=1e-12)
    # a = 2, b = 1, n = 2: P(K=k) = C(2,k) (2)_k (1)_(2-k) / (3)_2 with (3)_2 = 12:
    # k=0: 1·1·2/12 = 1/6; k=1: 2·2·1/12 = 1/3; k=2: 1·6·1/12 = 1/2
    pmf = plan.beta_binomial_pmf(np.array([2.0]), np.array([1.0]), 2)
    np.testing.assert_allclose(pmf[0], [1 / 6, 1 / 3, 1 / 2], rtol=1e-12)


def test_beta_binomial_matches_integrating_the_binomial():
    # E over p ~ Beta(a, b) of the binomial pmf, by quadrature on a fine grid.
    a, b, n = 0.7, 2.3, 6
    p = (np.arange(200_000) + 0.5) / 200_000
    dens = p ** (a - 1) * (1 - p) ** (b - 1)
    dens /= dens.sum()
    want = dens @ plan.binomial_pmf(p, n)
    got = plan.beta_binomial_pmf(np.array([a]), np.array([b]), n)[0]
    np.testing.assert_allclose(got, want, atol=2e-4)


def test_group_stats_hand_values():
    # Binomial(n=2, p=0.5): pmf [1/4, 1/2, 1/4]; mixed 1/2, any success 3/4, E[K] = 1,
    # rare successes: K = 1 is rare (1 <= 1 <= 1) → 1 · 1/2 = 1/2.
    st = plan.group_stats(plan.binomial_pmf(np.array([0.5]), 2))
    assert st["mixed"][0] == pytest.approx(0.5)
    assert st["any_success"][0] == pytest.approx(0.75)
    assert st["successes"][0] == pytest.approx(1.0)
    assert st["rare_successes"][0] == pytest.approx(0.5)


def test_closed_form_matches_simulation_for_known_probabilities():
    rng = np.random.default_rng(7)
    p = rng.uniform(0, 1, 500)
    for n in (2, 8, 16):
        exact = float(mixed_prob(p, n).mean())
        sim = simulate_mixed_share(p, n, groups_per_prompt=400, rng=rng)
        # 200,000 groups: Monte-Carlo standard error <= 0.5 / sqrt(2e5) ≈ 0.0011; allow 4 SE.
        assert sim == pytest.approx(exact, abs=0.0045)
        st = plan.group_stats(plan.binomial_pmf(p, n))
        np.testing.assert_allclose(st["mixed"], mixed_prob(p, n), atol=1e-12)


def test_fit_beta_prior_recovers_the_population():
    rng = np.random.default_rng(1)
    p = rng.beta(0.6, 2.4, 4000)
    s = rng.binomial(8, p)
    alpha, beta = plan.fit_beta_prior(s, np.full(4000, 8))
    assert alpha / (alpha + beta) == pytest.approx(0.2, abs=0.02)  # mean 0.6 / 3
    assert alpha + beta == pytest.approx(3.0, rel=0.35)  # concentration is harder to pin


def test_estimate_from_a_small_log_is_within_tolerance_of_simulation():
    # 3,000 prompts with true p ~ Beta(0.6, 2.4), each seen in 8 rollouts; predict the share of
    # mixed groups of n in a fresh round and compare with simulating that round from the true p.
    # Tolerance 0.02: the simulation's own error is ~0.002 (60,000 groups) and the realised p's
    # differ from their posterior expectation by ~0.3 / sqrt(3000) ≈ 0.0055 per prompt-mean.
    rng = np.random.default_rng(2024)
    p = rng.beta(0.6, 2.4, 3000)
    s = rng.binomial(8, p).astype(float)
    m = np.full(3000, 8.0)
    for n in (4, 16, 32):
        sim = simulate_mixed_share(p, n, groups_per_prompt=20, rng=rng)
        est = float(plan.estimate(s, m, n, "empirical")["mixed"].mean())
        assert est == pytest.approx(sim, abs=0.02)
    # The plug-in estimate calls every 0-of-8 prompt hopeless and misses by far more.
    plug = float(plan.estimate(s, m, 16, "none")["mixed"].mean())
    sim16 = simulate_mixed_share(p, 16, groups_per_prompt=20, rng=rng)
    assert sim16 - plug > 0.08


def test_run_plan_on_a_log(tmp_path):
    logs = tmp_path / "logs"
    # Eight prompts; judge 1 = success. Half succeed 1 of 4, half never.
    rows = []
    for i in range(8):
        js = [1.0, 0.0, 0.0, 0.0] if i % 2 == 0 else [0.0] * 4
        rows += group(f"train_{i}", "judge_score", js, ndcg=0.5)
    write_log(logs, "r", rows)
    b = write_dataset(tmp_path / "hard.parquet", [f"train_{i}" for i in range(8)] + ["train_99"])
    cfg = plan.PlanConfig(
        logs=logs,
        runs=("r",),
        n_agent=(2, 64),
        prior="none",
        price_per_call=0.01,
        buckets=(b,),
        target=0.4,
    )
    res = plan.run_plan(cfg)
    rows_by = {(r["bucket"], r["n_agent"]): r for r in res.rows}
    r2 = rows_by[("hard", 2)]
    # Plug-in p = 0.25 for four prompts, 0 for four: mixed(2) = 1 - 0.0625 - 0.5625 = 0.375
    # for the first four, 0 for the rest → mean 0.1875; successes 2 · 0.25 · 4 = 2.
    assert r2["mixed_share"] == pytest.approx(0.1875)
    assert r2["expected_successes"] == pytest.approx(2.0)
    assert r2["calls"] == 2 * 2 * 8 and r2["cost_usd"] == pytest.approx(0.32)
    assert r2["max_policy_turns"] == 2 * 8 * 6  # 7 turns, the last one forced
    # n = 64: mixed ≈ 1 - 0.75^64 ≈ 1 for four prompts → 0.5 ≥ 0.4: recommended.
    assert rows_by[("hard", 64)]["mixed_share"] == pytest.approx(0.5 * (1 - 0.75**64 - 0.25**64))
    assert res.recommend["hard"] == 64
    assert res.notes["bucket prompts missing from run"] == 1
    assert "cost" not in res.notes
    # no price: the cost is unknown (null) and the notes say how to set it, not $0
    unpriced = plan.run_plan(dataclasses.replace(cfg, price_per_call=None))
    assert {r["cost_usd"] for r in unpriced.rows} == {None}
    assert unpriced.notes["cost"].startswith("not priced: pass --price-per-call USD")


def test_buckets_not_in_the_run_are_named_and_all_missing_is_an_error(tmp_path):
    logs = tmp_path / "logs"
    write_log(logs, "r", group("train_1", "judge_score", [1.0, 0.0]))
    hard = write_dataset(tmp_path / "hard.parquet", ["train_1"])
    other = write_dataset(tmp_path / "other.parquet", ["val_1", "val_2"])
    cfg = plan.PlanConfig(logs=logs, runs=("r",), n_agent=(4,), buckets=(hard, other))
    res = plan.run_plan(cfg)
    assert [(r["bucket"], r["prompts"]) for r in res.rows] == [
        ("hard", 1), ("other", 0), ("all", 1)
    ]  # fmt: skip
    s = res.summary(cfg.target)
    # a bucket with no prompt in the run is said so, not "none reaches the target"
    assert s["recommended n_agent (other)"] == "no prompt of it in the run"
    assert s["recommended n_agent (hard)"] == 4 and s["bucket prompts missing from run"] == 2
    cfg = plan.PlanConfig(logs=logs, runs=("r",), buckets=(other,))
    with pytest.raises(ValueError) as e:
        plan.run_plan(cfg)
    assert str(e.value) == (
        f"no prompt of the --bucket files ({other}) is in run(s) r (1 prompts, e.g. train_1): "
        "check that the buckets and the run belong to the same prompt set"
    )


def test_plan_refuses_a_run_without_judge_scores(tmp_path):
    logs = tmp_path / "logs"
    write_log(logs, "p1", group("train_1", "ndcg", [0.5, 0.2]))
    with pytest.raises(ValueError, match="no judged rollouts"):
        plan.run_plan(plan.PlanConfig(logs=logs, runs=("p1",)))


def test_default_price_precedence(monkeypatch, tmp_path):
    assert plan.default_price(0.5) == 0.5
    monkeypatch.setenv("DDAI_PRICE_PER_CALL", "0.002")
    assert plan.default_price(None) == pytest.approx(0.002)
    monkeypatch.delenv("DDAI_PRICE_PER_CALL")
    toml = tmp_path / "ddai.toml"
    toml.write_text("[plan]\nprice_per_call = 0.003\n", encoding="utf-8")
    monkeypatch.setenv("DDAI_CONFIG", str(toml))
    assert plan.default_price(None) == pytest.approx(0.003)
    assert math.isclose(plan.default_price(0.0), 0.0)
    # none set: unknown, not free (before: 0, and the plan printed "cost $ 0.00" for every row)
    monkeypatch.setenv("DDAI_CONFIG", str(tmp_path / "none.toml"))
    assert plan.default_price(None) is None


def test_all_counts_each_prompt_once_when_bucket_files_overlap(tmp_path):
    logs = tmp_path / "logs"
    rows = []
    for i in range(4):
        rows += group(f"train_{i}", "judge_score", [1.0, 0.0], ndcg=0.5)
    write_log(logs, "r", rows)
    # round 2 is a subset of round 1, as the funnel makes it: "all" is the run's 4 prompts, not 6
    r1 = write_dataset(tmp_path / "round1.parquet", [f"train_{i}" for i in range(4)])
    r2 = write_dataset(tmp_path / "round2.parquet", ["train_0", "train_1"])
    cfg = plan.PlanConfig(logs=logs, runs=("r",), n_agent=(4,), buckets=(r1, r2), prior="none")
    rows_by = {r["bucket"]: r for r in plan.run_plan(cfg).rows}
    assert (rows_by["round1"]["prompts"], rows_by["round2"]["prompts"]) == (4, 2)
    assert rows_by["all"]["prompts"] == 4
    assert rows_by["all"]["calls"] == 2 * 4 * 4
    # p = 1/2 for each prompt: E[K] = 2 per group of 4, four prompts
    assert rows_by["all"]["expected_successes"] == pytest.approx(8.0)


def test_default_buckets_refuse_a_run_without_ndcg(tmp_path):
    logs = tmp_path / "logs"
    rows = []
    for i in range(4):
        rows += group(f"train_{i}", "judge_score", [1.0, 0.0])
    write_log(logs, "judged", rows)
    # no NDCG: the default B / A / 0 split would put every prompt in bucket 0 (missing NDCG
    # counting 0); it is refused, naming --bucket
    with pytest.raises(ValueError, match=r"(?s)judged has no ndcg.*--bucket"):
        plan.run_plan(plan.PlanConfig(logs=logs, runs=("judged",), n_agent=(4,)))
    # with bucket files the plan needs no NDCG
    b = write_dataset(tmp_path / "hard.parquet", [f"train_{i}" for i in range(4)])
    res = plan.run_plan(plan.PlanConfig(logs=logs, runs=("judged",), n_agent=(4,), buckets=(b,)))
    assert [r["prompts"] for r in res.rows] == [4, 4]
