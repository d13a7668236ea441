"""PPO's "the policy learned nothing" warning comes from PPO's own GAE advantages: with every
group's rewards equal (GRPO's advantages would all be 0) the critic's values still make non-zero
advantages, so no warning; with every GAE advantage 0 the summary says so on stderr."""

from __future__ import annotations

import json

import pytest
from cli_schemas import check
from support.lazy import heavy, torch
from support.toy_world import make_world
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts

ppo = heavy("ddai.trainer.ppo.train")


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ppo_signal"), hidden_size=32)


def _run(root, data, tiny, tag: str):
    # ddai-phase1 without NDCG and without the gate: every rollout's reward is the bias, 0.1
    args = [
        "train", "ppo", "--model", str(tiny), "--data", str(data / "dataset.parquet"),
        "--corpus", str(data / "pages.parquet"), "--out-dir", str(root / tag),
        "--logs", str(root / "logs"), "--run-id", tag, "--reward", "ddai-phase1",
        "--w-ndcg", "0", "--no-gate", "--n-agent", "2", "--batch-size", "4",
        "--ppo-epochs", "1", "--max-steps", "1", "--max-turns", "2", "--max-turn-tokens", "8",
        "--max-completion-tokens", "40", "--obs-max-tokens", "8", "--skip-preflight", "--json",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    check("train-ppo", summary)  # docs/schemas/train-ppo.json
    rows = read_rollouts(root / "logs", [tag]).to_pylist()
    assert [r["reward"] for r in rows] == pytest.approx([0.1] * 4)
    assert summary["informative_group_share"] == 0.0  # no group had reward variance
    return summary, " ".join(res.stderr.split()), rows


@pytest.mark.slow
def test_equal_rewards_with_nonzero_gae_advantages_do_not_warn(toy_world):
    summary, err, rows = _run(*toy_world, "gae")
    top = summary["advantage_abs_max"]
    assert top > 0 and summary["zero_advantage_steps"] == 0
    # each logged advantage is a rollout's mean over its policy tokens: at most the largest
    row_adv = [abs(r["advantage"]) for r in rows]
    assert 0 < max(row_adv) <= top + 1e-6
    assert "learned nothing" not in err


@pytest.mark.slow
def test_all_zero_gae_advantages_warn(toy_world, monkeypatch):
    from ddai.trainer.ppo import train as ppo

    def no_advantage(rewards, values, mask, gamma, lam):
        return torch.zeros_like(rewards), values.clone()

    monkeypatch.setattr(ppo, "gae", no_advantage)
    summary, err, _ = _run(*toy_world, "flat")
    assert summary["advantage_abs_max"] == 0.0 and summary["zero_advantage_steps"] == 1
    assert "warning: every GAE advantage of the run's 1 step(s) was 0" in err
    assert "learned nothing" in err
