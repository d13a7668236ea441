"""Per-step training metrics: kept from the trainer's logs and written to the log store's side
table atomically, clip ratios included."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from support.lazy import heavy

train_metrics = heavy("ddai.trainer.runtime.train_metrics")


def _state(step, main=True):
    return SimpleNamespace(global_step=step, is_world_process_zero=main)


def test_keeps_reward_loss_and_clip_ratio_per_step(tmp_path):
    cb = train_metrics.TrainMetricsLog(tmp_path / "logs", "r1")
    cb.on_log(
        None, _state(1), None, logs={"reward": 0.5, "loss": 0.1, "clip_ratio/region_mean": 0.0}
    )
    cb.on_log(None, _state(2), None, logs={"reward": 0.7, "clip_ratio/region_mean": 0.25})
    cb.on_log(None, _state(2), None, logs={"train_runtime": 3.0})  # nothing kept: no row
    cb.on_log(
        None,
        _state(3),
        None,
        logs={"reward": float("nan")},
    )  # not finite: no row
    cb.on_log(None, _state(4, main=False), None, logs={"reward": 1.0})  # other ranks: no row
    rows = [
        json.loads(x)
        for x in train_metrics.side_table_path(tmp_path / "logs", "r1").read_text().splitlines()
    ]
    assert rows == [
        {"run_id": "r1", "step": 1, "reward": 0.5, "loss": 0.1, "clip_ratio": 0.0},
        {"run_id": "r1", "step": 2, "reward": 0.7, "clip_ratio": 0.25},
    ]
    assert cb.mean("clip_ratio") == pytest.approx(0.125)
    assert cb.mean("clip_ratio_low") is None
    assert not list(train_metrics.side_table_path(tmp_path / "logs", "r1").parent.glob(".tmp-*"))


def test_without_a_log_store_it_only_keeps_rows():
    cb = train_metrics.TrainMetricsLog()
    cb.on_log(None, _state(1), None, logs={"clip_ratio/high_mean": 0.5})
    assert cb.rows == [{"run_id": None, "step": 1, "clip_ratio_high": 0.5}]


def test_a_resumed_run_keeps_earlier_steps_and_replaces_later_ones(tmp_path):
    first = train_metrics.TrainMetricsLog(tmp_path, "r")
    for step in (1, 2, 3):
        first.on_log(None, _state(step), None, logs={"reward": float(step)})
    resumed = train_metrics.TrainMetricsLog(tmp_path, "r")  # resumed from the step-2 checkpoint
    resumed.on_log(None, _state(3), None, logs={"reward": 30.0})
    resumed.on_log(None, _state(4), None, logs={"reward": 40.0})
    rows = [
        json.loads(x) for x in train_metrics.side_table_path(tmp_path, "r").read_text().splitlines()
    ]
    assert [(r["step"], r["reward"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
