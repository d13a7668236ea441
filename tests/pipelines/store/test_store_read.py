"""Reading a run that is not in the store changes nothing on disk: no store folder, no lock
file (a failed read that made ``<logs>/_locks`` turned a missing store into an empty one, and
the demo's fallback store stopped being read)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import store_read


def test_a_missing_run_of_a_missing_store_makes_no_folder(tmp_path):
    logs = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="run\\(s\\) x not in"):
        store_read.snapshot(logs, ["x"])
    assert not logs.exists()


def test_a_missing_run_takes_no_lock_and_a_present_one_reads(tmp_path):
    store.write_run(tmp_path, "here", [{"uid": "u", "rollout_idx": 0, "reward": 1.0}])
    with pytest.raises(FileNotFoundError, match="run\\(s\\) gone not in"):
        store_read.snapshot(tmp_path, ["here", "gone"])
    assert not list(tmp_path.rglob("gone*"))
    with store_read.snapshot(tmp_path, ["here"]) as snap:
        assert snap.manifests["here"]["rollouts_total"] == 1 and len(snap.all_files()) == 1


def test_a_failed_distill_leaves_no_store_behind(tmp_path):
    logs = tmp_path / "nowhere"
    out = tmp_path / "sft.parquet"
    res = CliRunner().invoke(app, ["distill", "--logs", str(logs), "--run", "x", "--out", str(out)])
    assert res.exit_code == 2 and "not in" in res.output
    assert not logs.exists() and not out.exists()
    res = CliRunner().invoke(app, ["runs", "--logs", str(logs)])
    assert res.exit_code == 2 and "does not exist" in res.output
