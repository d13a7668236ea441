"""The learning bench's machinery at a reduced size (not its learning claim, which needs the full
run): one SFT start, every arm per seed trained on train questions and evaluated on held-out ones,
the held-out gain against the control, the exact fixed-first-query baseline, clip ratios, and the
text and files it writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[3] / "bench" / "bench_grpo_learning.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_grpo_learning", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_reduced_bench_runs_every_arm_and_reports_the_heldout_gain(tmp_path, capsys):
    bench = _bench()
    argv = [
        "--seeds", "2", "--generations", "2", "--sft-steps", "40", "--prompts", "2",
        "--n-agent", "2", "--eval-n-agent", "1", "--work", str(tmp_path / "work"),
        "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert bench.main(argv) == 0
    res = json.loads((tmp_path / "out" / "grpo_learning.json").read_text())
    arms = res["arms"]
    assert list(arms) == ["control", "grpo", "gspo-ddai", "gspo-ddai@preset"]
    held = res["task"]["heldout_questions"]
    for arm, e in arms.items():
        assert len(e["train_reward_per_batch"]) == 2, arm  # one value per rollout batch
        assert len(e["heldout_reward_per_seed"]) == 2, arm
        assert e["heldout_reward"] == pytest.approx(sum(e["heldout_reward_per_seed"]) / 2)
        shares = e["heldout_first_page"]
        assert sum(shares.values()) == pytest.approx(1.0), arm
        # Only a first search of the asked page earns 1.0; every other rollout at most 0.1.
        assert e["heldout_reward"] <= shares["asked"] + 0.1 * (1 - shares["asked"]) + 1e-9, arm
    assert arms["control"]["changed_parameters"] == [0, 0]  # lr 0: the start, unchanged
    assert arms["gspo-ddai@preset"]["learning_rate"] == 1e-6
    assert arms["grpo"]["optimizer_steps"] == 2
    assert arms["gspo-ddai"]["optimizer_steps"] == 4  # two optimizer steps per rollout batch
    ctrl = arms["control"]["heldout_reward_per_seed"]
    for arm in ("grpo", "gspo-ddai", "gspo-ddai@preset"):
        e = arms[arm]
        # The gain is held-out reward minus the control's with the same seed.
        assert e["gain_per_seed"] == pytest.approx(
            [t - c for t, c in zip(e["heldout_reward_per_seed"], ctrl, strict=True)]
        )
        assert e["gain"] == pytest.approx(sum(e["gain_per_seed"]) / 2) and e["gain_se"] is not None
    assert arms["grpo"]["clip_ratio"] == 0.0  # one step per batch: the ratio is exactly 1
    assert arms["gspo-ddai"]["clip_ratio"] is not None
    fixed = res["fixed_first_query"]
    # Each topic is asked about in 4 held-out questions: 1.0 there, 0.1 elsewhere.
    assert fixed["heldout_reward"] == pytest.approx((4 + 0.1 * (held - 4)) / held)
    printed = capsys.readouterr().out
    assert "gspo-ddai@preset" in printed and "best fixed first query" in printed
    assert (tmp_path / "out" / "grpo_learning.html").is_file()


def test_arms_always_include_the_control_and_default_to_learn_task_settings():
    from ddai.trainer import learn_task

    bench = _bench()
    args = bench.parse(["--arms", "gspo-ddai", "grpo"])
    assert args.arms == ["control", "grpo", "gspo-ddai"]  # bench order, control first
    assert (args.lr, args.n_agent, args.prompts, args.generations) == (
        learn_task.LEARNING_RATE,
        learn_task.N_AGENT,
        learn_task.PROMPTS,
        learn_task.GENERATIONS,
    )
    assert bench.parse(["--lr", "1e-4"]).lr == 1e-4
