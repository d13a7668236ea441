"""The training-dynamics section: per-step reward and clip ratio from the side table training
writes, hand-checked summaries, and a note when no run has any."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.lazy import heavy

from ddai.pipelines.store import query, write_run
from ddai.reports.blocks import Note, Table
from ddai.reports.config import ReportConfig
from ddai.reports.context import ReportContext
from ddai.reports.sections import training

train_metrics = heavy("ddai.trainer.runtime.train_metrics")


def _ctx(tmp_path, logs):
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False)
    con = query.connect(logs)
    return ReportContext.open(cfg, con), con


def test_clip_ratio_and_reward_per_step(tmp_path):
    logs = tmp_path / "logs"
    for run in ("gspo", "plain"):
        write_run(logs, run, [{"uid": "u", "rollout_idx": 0, "step": 1, "reward": 0.5}])
    cb = train_metrics.TrainMetricsLog(logs, "gspo")
    for step, logged in enumerate(
        [
            {"reward": 0.2, "clip_ratio/region_mean": 0.0},
            {"clip_ratio/region_mean": 0.5},  # the second optimizer step of a rollout batch
            {"reward": 0.6, "clip_ratio/region_mean": 0.0},
            {"clip_ratio/region_mean": 0.25},
        ],
        start=1,
    ):
        cb.on_log(
            None, SimpleNamespace(global_step=step, is_world_process_zero=True), None, logs=logged
        )
    ctx, con = _ctx(tmp_path, logs)
    try:
        section = training.build(ctx)
    finally:
        con.close()
    s = section.stats["runs"]
    assert list(s) == ["gspo"]  # "plain" has no training metrics
    assert s["gspo"]["steps"] == 4 and s["gspo"]["steps_clipped"] == 2
    assert s["gspo"]["clip_ratio_mean"] == pytest.approx(0.1875)  # (0 + .5 + 0 + .25) / 4
    assert (s["gspo"]["reward_first"], s["gspo"]["reward_last"]) == (0.2, 0.6)
    table = next(b for b in section.blocks if isinstance(b, Table))
    assert table.rows[0][0] == "gspo" and table.rows[0][-1] == "2 of 4"
    assert "fig-training" in str(section.blocks[0].html)


def test_note_when_no_run_was_trained_here(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "r", [{"uid": "u", "rollout_idx": 0}])
    ctx, con = _ctx(tmp_path, logs)
    try:
        section = training.build(ctx)
    finally:
        con.close()
    assert isinstance(section.blocks[0], Note) and "train_metrics" in section.blocks[0].text
