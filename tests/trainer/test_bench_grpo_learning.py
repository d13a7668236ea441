"""The learning bench's machinery at a reduced size (not its learning claim, which needs the full
run): one SFT start, every arm per seed, per-batch curves, the gain against the control, clip
ratios, and the text and files it writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "bench_grpo_learning.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_grpo_learning", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_reduced_bench_runs_every_arm_and_reports_the_gain(tmp_path, capsys):
    bench = _bench()
    argv = [
        "--seeds", "2", "--generations", "2", "--sft-steps", "40", "--prompts", "2",
        "--n-agent", "2", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert bench.main(argv) == 0
    res = json.loads((tmp_path / "out" / "grpo_learning.json").read_text())
    arms = res["arms"]
    assert list(arms) == ["control", "grpo", "gspo-ddai"]
    for arm, e in arms.items():
        assert len(e["reward_per_batch"]) == 2, arm  # one value per rollout batch
    assert arms["control"]["changed_parameters"] == [0, 0]  # lr 0: the start, unchanged
    assert arms["grpo"]["optimizer_steps"] == 2
    assert arms["gspo-ddai"]["optimizer_steps"] == 4  # two optimizer steps per rollout batch
    for arm in ("grpo", "gspo-ddai"):
        assert len(arms[arm]["gain_per_seed"]) == 2 and arms[arm]["gain_se"] is not None
        assert arms[arm]["gain"] == pytest.approx(sum(arms[arm]["gain_per_seed"]) / 2)
    assert arms["grpo"]["clip_ratio"] == 0.0  # one step per batch: the ratio is exactly 1
    assert arms["gspo-ddai"]["clip_ratio"] is not None
    printed = capsys.readouterr().out
    assert "gspo-ddai" in printed and "gain" in printed
    assert (tmp_path / "out" / "grpo_learning.html").is_file()
