"""``ddai.trainer.runtime.accel`` on stand-in accelerators: per-rank seeds, shares of a global batch,
metrics averaged over the ranks that report them, and the run config written by the main
process only (the 2-process runs in ``test_dist_ppo_value`` exercise the real collectives)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from support.lazy import heavy, torch

accel = heavy("ddai.trainer.runtime.accel")


def rank(i: int, world: int = 2) -> SimpleNamespace:
    return SimpleNamespace(
        process_index=i, num_processes=world, is_main_process=i == 0, distributed_type="MULTI_CPU"
    )


def test_rank_seed_offsets_the_seed_and_seeds_torch():
    assert accel.rank_seed(7, rank(1)) == 8
    a = torch.rand(3)
    accel.rank_seed(7, rank(1))
    assert torch.equal(torch.rand(3), a)  # torch was seeded with 8 both times
    assert accel.rank_seeds(7, rank(0, world=3)) == [7, 8, 9]


def test_local_slice_gives_each_rank_its_contiguous_share():
    items = list("abcdef")
    assert [accel.local_slice(items, rank(i, 3)) for i in range(3)] == [
        ["a", "b"],
        ["c", "d"],
        ["e", "f"],
    ]
    with pytest.raises(ValueError, match="do not split evenly over 4"):
        accel.local_slice(items, rank(0, 4))


def test_mean_metrics_average_over_the_ranks_that_report_each_key(monkeypatch):
    from ddai.trainer.runtime import accel

    per_rank = [{"loss": 1.0, "judge": 0.5}, {"loss": 3.0}]
    monkeypatch.setattr(accel, "gather_rows", lambda rows, acc: per_rank)
    out = accel.mean_metrics({"loss": 1.0, "judge": 0.5}, rank(0))
    assert out == {"loss": 2.0, "judge": 0.5}
    single = accel.mean_metrics({"loss": 1.0}, rank(0, world=1))
    assert single == {"loss": 1.0}


def test_run_config_is_written_by_the_main_process_only(tmp_path):
    from ddai.trainer.value.train import ValueTrainConfig

    cfg = ValueTrainConfig(model="m", output_dir=tmp_path / "out", seed=3)
    path = accel.write_run_config(tmp_path / "other", cfg, rank(1))
    assert not path.exists()
    path = accel.write_run_config(tmp_path / "out", cfg, rank(0))
    doc = json.loads(path.read_text())
    assert doc["world_size"] == 2 and doc["seeds"] == [3, 4]
    assert doc["config"]["output_dir"] == str(tmp_path / "out") and doc["config"]["seed"] == 3
    assert not list(path.parent.glob("*.tmp"))
