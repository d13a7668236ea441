"""``ddai train ppo --resume``: a run stopped after 2 steps continues with step 3 (same run id,
metrics and rollout log continued, the checkpoint's weights and optimizer states), and a resume
with nothing to resume exits 2 naming the fix."""

from __future__ import annotations

import json

import pytest
from support.lazy import heavy, safetensors_torch, torch
from support.toy_world import make_world
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts, write_run
from ddai.trainer import toy
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

ck = heavy("ddai.trainer.ppo.checkpoint")
train = heavy("ddai.trainer.ppo.train")

runner = CliRunner()


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ppo_resume"), hidden_size=32)


def _cfg(root, data, tiny, **kw) -> train.PPORunConfig:
    base = dict(
        model=str(tiny),
        data=data / "dataset.parquet",
        corpus=data / "pages.parquet",
        output_dir=root / "out",
        logs=root / "logs",
        rewards=RewardOverrides(reward="ddai-phase1"),
        n_agent=2,
        batch_size=4,
        ppo_epochs=1,
        learning_rate=1e-3,
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=12, max_completion_tokens=64, obs_max_tokens=12
        ),
        progress=False,
        skip_preflight=True,
        kl_mode="loss",
        kl_estimator="k2",
        entropy_coef=0.01,
        reward_norm="scale",
    )
    return train.PPORunConfig(**{**base, **kw})


def _mark_step_rewards(logs, run_id: str, step: int) -> None:
    """Rewrite the run's ``step`` rows with rewards 0.31, 0.32, ... (mean ≠ a toy step's)."""
    rows = read_rollouts(logs, [run_id]).to_pylist()
    marked = [r for r in rows if r["step"] == step]
    for i, r in enumerate(marked):
        r["reward"] = 0.31 + 0.01 * i
    steps = sorted({r["step"] for r in rows})
    write_run(logs, run_id, rows, normalize=False, manifest={"steps": steps})


def _step_mean(rows: list[dict], step: int) -> float:
    rewards = [r["reward"] for r in rows if r["step"] == step and r["reward"] is not None]
    return sum(rewards) / len(rewards)


@pytest.mark.slow
def test_resume_continues_steps(toy_world):
    root, data, tiny = toy_world
    backends = toy.local_backends(toy.corpus())
    first = train.run_ppo(_cfg(root, data, tiny, max_steps=2, run_id="ppo_resume"), backends)
    assert first.resumed_from == 0
    ckpt = root / "out" / "checkpoint-2"
    assert ck.read_state(ckpt).step == 2 and ck.read_state(ckpt).run_id == "ppo_resume"
    saved = safetensors_torch.load_file(ckpt / "model.safetensors")
    adam = torch.load(ckpt / ck.OPTIM_FILE, weights_only=True)["policy"]["state"]
    assert adam and all(int(s["step"]) == 2 for s in adam.values())  # one step per PPO step

    # Step 1's rewards marked in the log, so its mean differs from any step the resume trains.
    _mark_step_rewards(root / "logs", "ppo_resume", 1)
    # A crash after step 3 was logged but before its checkpoint: its rows and metrics are redone.
    step2 = [r for r in read_rollouts(root / "logs", ["ppo_resume"]).to_pylist() if r["step"] == 2]
    write_run(
        root / "logs", "ppo_resume", [{**r, "step": 3} for r in step2], append=True, normalize=False
    )
    with (root / "out" / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 3, "stale": True}) + "\n")

    # No run id given: the checkpoint's is kept.
    second = train.run_ppo(_cfg(root, data, tiny, max_steps=3, resume=True), backends)
    assert second.resumed_from == 2 and second.run_id == "ppo_resume"
    # the run's rollouts in the log (steps 1-3), not the resumed step's 4 only
    assert second.rollouts_logged == 12
    assert (root / "out" / "checkpoint-3").is_dir() and not ckpt.exists()
    adam = torch.load(root / "out" / "checkpoint-3" / ck.OPTIM_FILE, weights_only=True)
    assert all(int(s["step"]) == 3 for s in adam["policy"]["state"].values())  # Adam continued
    final = safetensors_torch.load_file(root / "out" / "model.safetensors")
    assert any(not torch.equal(saved[k], final[k]) for k in saved)  # step 3 trained on
    metrics = [
        json.loads(line) for line in (root / "out" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == [1, 2, 3] and "stale" not in metrics[-1]
    assert all("actor/kl_loss" in m and "actor/entropy" in m for m in metrics)
    rows = read_rollouts(root / "logs", ["ppo_resume"]).to_pylist()
    assert sorted(r["step"] for r in rows) == [1] * 4 + [2] * 4 + [3] * 4
    # reward_first is the run's step 1 (logged before the resume), reward_last its step 3
    assert second.reward_first == pytest.approx(_step_mean(rows, 1), abs=1e-12)
    assert second.reward_last == pytest.approx(_step_mean(rows, 3), abs=1e-12)

    with pytest.raises(TrainConfigError, match="raise --max-steps"):
        train.run_ppo(_cfg(root, data, tiny, max_steps=3, resume=True), backends)


def test_resume_without_a_checkpoint_exits_2(toy_world, tmp_path):
    _, data, tiny = toy_world
    res = runner.invoke(
        app,
        [
            "train", "ppo", "--model", str(tiny), "--data", str(data / "dataset.parquet"),
            "--corpus", str(data / "pages.parquet"), "--out", str(tmp_path / "o"), "--resume",
        ],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "run without --resume" in " ".join(res.output.split())


def test_checkpoint_write_is_atomic_and_keeps_one(tmp_path, monkeypatch):
    class Opt:
        def state_dict(self):
            return {"state": {}, "param_groups": []}

    from ddai.trainer.runtime import save
    from ddai.trainer.value import critic as value

    # Stand-in savers (the real ones are exercised by the slow test): record where they write.
    calls = []
    monkeypatch.setattr(
        save, "save_model", lambda m, t, d: (d.mkdir(parents=True), calls.append(d.name))
    )
    monkeypatch.setattr(
        value,
        "save_value_model",
        lambda m, t, d, source: (d.mkdir(parents=True), calls.append(source)),
    )
    for step in (1, 2):
        ck.save_checkpoint(
            tmp_path, ck.PPOState(step, "r", "src"), policy=None, tok=None,
            critic=None, optimizers={"policy": Opt().state_dict(), "critic": {}},
        )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]
    assert ck.read_state(tmp_path / "checkpoint-2") == ck.PPOState(2, "r", "src")
    assert calls == [".checkpoint-1.tmp", "src", ".checkpoint-2.tmp", "src"]
    with pytest.raises(TrainConfigError, match="not a `ddai train ppo` checkpoint"):
        ck.read_state(tmp_path)
