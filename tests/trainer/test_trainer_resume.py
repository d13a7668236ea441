"""``--resume``: a stopped SFT run continues from its last checkpoint instead of starting over."""

from __future__ import annotations

import json

import pytest
from support.backends import toy_backends
from support.toy_world import run_fields, tiny_on_toy

from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.sft.train import SFTRunConfig, run_sft


def _cfg(tiny, data, out, max_steps, resume=False):
    return SFTRunConfig(
        model=str(tiny),
        data=[data / "sft.parquet"],
        output_dir=out,
        max_steps=max_steps,
        learning_rate=1e-3,
        batch_size=4,
        max_length=256,
        logging_steps=1,
        save_steps=2,
        report_to="jsonl",
        resume=resume,
    )


def test_sft_resume_continues_from_the_last_checkpoint(tmp_path):
    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")
    out = tmp_path / "sft"
    first = run_sft(_cfg(tiny, data, out, max_steps=2))
    assert first.steps == 2 and (out / "checkpoint-2").is_dir()

    # Mark checkpoint-2's state: a resumed run carries its history forward, a fresh one cannot.
    state_file = out / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["log_history"].append({"step": 2, "resume_marker": 1.0})
    state_file.write_text(json.dumps(state))

    resumed = run_sft(_cfg(tiny, data, out, max_steps=4, resume=True))
    assert resumed.steps == 4
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert {"step": 2, "resume_marker": 1.0} in state["log_history"]
    logged = [s["step"] for s in state["log_history"] if "loss" in s]
    assert logged == [1, 2, 3, 4]  # steps 1-2 from the first run, 3-4 after the resume


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path):
    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")
    with pytest.raises(Exception, match="no checkpoint-N folder"):
        run_sft(_cfg(tiny, data, tmp_path / "empty", max_steps=2, resume=True))


@pytest.mark.slow
def test_grpo_resume_continues_steps_and_appends_to_the_rollout_log(tmp_path):
    from ddai.pipelines.store import read_rollouts, write_run
    from ddai.trainer.grpo.train import GRPORunConfig, run_grpo

    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")

    def run(max_steps, resume):
        backends = toy_backends()
        cfg = GRPORunConfig(
            **run_fields(tiny, data, tmp_path / "grpo", tmp_path / "logs", "grpo_resume"),
            n_agent=2,
            batch_size=4,
            max_steps=max_steps,
            learning_rate=1e-3,
            save_steps=1,
            resume=resume,
            episode=EpisodeConfig(
                max_turns=2, max_turn_tokens=16, max_completion_tokens=96, obs_max_tokens=16
            ),
            rewards=RewardOverrides(reward="judge-only"),
        )
        return run_grpo(cfg, backends)

    first = run(1, resume=False)
    assert first.steps == 1 and (tmp_path / "grpo" / "checkpoint-1").is_dir()
    # Step 1's rewards marked in the log, so its mean differs from any step a resume trains.
    logged = read_rollouts(tmp_path / "logs", ["grpo_resume"]).to_pylist()
    for i, r in enumerate(logged):
        r["reward"] = 0.31 + 0.01 * i
    write_run(tmp_path / "logs", "grpo_resume", logged, normalize=False, manifest={"steps": [1]})
    second = run(2, resume=True)
    assert second.steps == 2 and (tmp_path / "grpo" / "checkpoint-2").is_dir()
    steps = sorted(r["step"] for r in read_rollouts(tmp_path / "logs", ["grpo_resume"]).to_pylist())
    # step 1 from the first run, step 2 from the resumed one: nothing trained or logged twice
    assert steps == [1] * 4 + [2] * 4
    # A run that crashed after logging step 2 but before saving checkpoint-2 resumes from
    # checkpoint-1 and trains step 2 again: its earlier step-2 rows are dropped, not doubled.
    import shutil

    shutil.rmtree(tmp_path / "grpo" / "checkpoint-2")
    third = run(2, resume=True)
    steps = sorted(r["step"] for r in read_rollouts(tmp_path / "logs", ["grpo_resume"]).to_pylist())
    assert steps == [1] * 4 + [2] * 4
    assert third.rollouts_logged == 8  # the run's total in the log, step 1 included
    rows = read_rollouts(tmp_path / "logs", ["grpo_resume"]).to_pylist()

    def step_mean(step):
        rewards = [r["reward"] for r in rows if r["step"] == step and r["reward"] is not None]
        return sum(rewards) / len(rewards)

    # reward_first is step 1's (logged by the first run), reward_last step 2's
    assert third.reward_first == pytest.approx(step_mean(1), abs=1e-12)
    assert third.reward_last == pytest.approx(step_mean(2), abs=1e-12)
