"""How often PPO's clip acted: every step's ``actor/clip_frac`` and the ratio spread in the
metrics, the run's mean clip fraction in the summary, and a warning on stderr after the summary
when the clip never acted (at a learning rate of 1e-6 the ratio stays inside ε)."""

from __future__ import annotations

import json

import pytest
from cli_schemas import check
from support.lazy import heavy, torch
from support.toy_world import make_world
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.trainer.ppo.clip_stats import ClipStats, clip_never_acted

terms = heavy("ddai.trainer.ppo.terms")


def test_ratio_deviation_is_the_largest_move_on_a_policy_token():
    old = torch.zeros(2, 3)
    logp = torch.log(torch.tensor([[1.1, 0.95, 3.0], [1.0, 1.02, 0.5]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the 3.0 and 0.5 ratios sit on observations
    assert terms.ratio_deviation_max(logp, old, mask) == pytest.approx(0.1, abs=1e-6)
    assert terms.ratio_deviation_max(logp, old, torch.zeros(2, 3)) == 0.0
    _, metrics = terms.actor_loss(logp, old, torch.ones(2, 3), mask, eps_low=0.2, eps_high=0.2)
    assert metrics["actor/ratio_dev_max"] == pytest.approx(0.1, abs=1e-6)
    assert metrics["actor/clip_frac"] == 0.0  # 1.1 < 1 + 0.2: nothing clipped
    _, metrics = terms.actor_loss(logp, old, torch.ones(2, 3), mask, eps_low=0.05, eps_high=0.05)
    assert metrics["actor/clip_frac"] == pytest.approx(0.25)  # 1.1 > 1.05 with A > 0: 1 of 4


def test_clip_stats_fold_the_steps_and_warn_only_when_the_clip_never_acted():
    stats = ClipStats(0.2, 0.28)
    stats.observe({"step": 1, "stale": True})  # a row without clip metrics is skipped
    for frac, dev in ((0.0, 1e-5), (0.0, 3.9e-5), (0.0, 2e-5)):
        stats.observe({"actor/clip_frac": frac, "actor/ratio_dev_max": dev})
    fields = stats.result_fields()
    assert fields == {
        "clip_frac_mean": 0.0,
        "clip_acted_steps": 0,
        "ratio_spread": 3.9e-5,
        "clip_low": 0.2,
        "clip_high": 0.28,
    }
    why = clip_never_acted({"steps": 3, **fields})
    assert why is not None and "never acted in the run's 3 step(s)" in why
    assert "3.9e-05" in why and "ε = 0.2 below, 0.28 above" in why and "--lr" in why
    stats.observe({"actor/clip_frac": 0.02, "actor/ratio_dev_max": 0.3})
    fields = stats.result_fields()
    assert fields["clip_frac_mean"] == pytest.approx(0.005) and fields["clip_acted_steps"] == 1
    assert clip_never_acted({"steps": 4, **fields}) is None
    assert clip_never_acted({"steps": 0, "clip_frac_mean": None}) is None  # no step ran
    inert = clip_never_acted(
        {"steps": 2, **ClipStats(0.2, 0.2).result_fields(), "clip_frac_mean": 0.0}
    )
    assert inert is not None and "exactly 1" in inert  # no move at all: one pass, one mini-batch


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ppo_clip"), hidden_size=32)


def _run(root, data, tiny, tag: str, *extra: str):
    args = [
        "train", "ppo", "--model", str(tiny), "--data", str(data / "dataset.parquet"),
        "--corpus", str(data / "pages.parquet"), "--out-dir", str(root / tag),
        "--logs", str(root / "logs"), "--run-id", tag, "--reward", "ddai-phase1",
        "--search", "local", "--generator", "local", "--judge", "local", "--n-agent", "2",
        "--batch-size", "4", "--mini-batch-size", "2", "--ppo-epochs", "2", "--max-steps", "2",
        "--max-turns", "2", "--max-turn-tokens", "8", "--max-completion-tokens", "40",
        "--obs-max-tokens", "8", "--skip-preflight", "--json", *extra,
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    check("train-ppo", json.loads(res.stdout))  # docs/schemas/train-ppo.json
    metrics = [json.loads(x) for x in (root / tag / "metrics.jsonl").read_text().splitlines()]
    return json.loads(res.stdout), res.stderr, metrics


@pytest.mark.slow
def test_a_run_at_lr_1e6_warns_that_the_clip_never_acted(toy_world):
    summary, err, metrics = _run(*toy_world, "inert", "--lr", "1e-6")
    assert [m["actor/clip_frac"] for m in metrics] == [0.0, 0.0]
    # the second mini-batch ran on a moved policy: the ratio left 1, but not by ε
    assert 0 < summary["ratio_spread"] < 0.2
    assert summary["ratio_spread"] == max(m["actor/ratio_dev_max"] for m in metrics)
    assert summary["clip_frac_mean"] == 0.0 and summary["clip_acted_steps"] == 0
    said = " ".join(err.split())
    assert "warning:" in said and "the PPO clip never acted in the run's 2 step(s)" in said
    assert said.count("never acted") == 1  # one warning, worded for PPO (not GRPO's ε_low)
    assert f"{summary['ratio_spread']:.3g}" in said and "ε = 0.2 below, 0.2 above" in said


@pytest.mark.slow
def test_a_run_whose_clip_acts_reports_how_often_and_does_not_warn(toy_world):
    summary, err, metrics = _run(*toy_world, "acts", "--lr", "1e-2", "--clip-low", "0.01")
    fracs = [m["actor/clip_frac"] for m in metrics]
    assert summary["clip_frac_mean"] == pytest.approx(sum(fracs) / 2) and max(fracs) > 0
    assert summary["clip_acted_steps"] == sum(f > 0 for f in fracs) >= 1
    assert "clip never acted" not in err
