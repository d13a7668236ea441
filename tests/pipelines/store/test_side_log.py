"""A run's growing side table (training metrics) goes through the run's one writer: appended per
step without rewriting what it wrote, listed with its hash in the manifest (``lineage --check``
sees a changed one), and listed by the run's first commit when it came before it."""

from __future__ import annotations

import json
from types import SimpleNamespace

from support.lazy import heavy

from ddai.pipelines import store
from ddai.pipelines.store.side_log import SideLog, read_rows, side_path
from ddai.trainer.episode.logrows import RolloutLog, logged_steps

train_metrics = heavy("ddai.trainer.runtime.train_metrics")


def _rows(step: int) -> list[dict]:
    return [
        {"uid": f"u{i}", "rollout_idx": 0, "step": step, "question": "q",
         "reference_answer": "a", "answer": "a", "judge_score": 0.5, "reward": 1.0, "extra": {}}
        for i in range(2)
    ]  # fmt: skip


def _state(step: int) -> SimpleNamespace:
    return SimpleNamespace(is_world_process_zero=True, global_step=step)


def test_a_50_step_run_appends_and_rewrites_no_byte_it_wrote(tmp_path):
    logs = tmp_path / "logs"
    log = RolloutLog(logs, "g")
    metrics = train_metrics.TrainMetricsLog(logs, "g", writer=log)
    path = train_metrics.side_table_path(logs, "g")
    before = b""
    sizes = []
    for step in range(1, 51):
        log.append(_rows(step), step=step)
        metrics.on_log(None, _state(step), None, logs={"loss": float(step)})
        now = path.read_bytes()
        assert now.startswith(before)  # what was written stays byte for byte
        sizes.append(len(now) - len(before))
        before = now
        if step == 1:
            inode = path.stat().st_ino
    log.flush()
    assert path.stat().st_ino == inode  # appended in place, never replaced by a new file
    # linear growth: each step adds one row of about the same size
    assert max(sizes) - min(sizes) <= 4 and sum(sizes) == len(before)
    rows = [json.loads(x) for x in before.decode().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 51))
    man = store.run_manifest(logs, "g")
    assert man["side_tables"]["train_metrics"]["rows"] == 50
    assert logged_steps(man) == list(range(1, 51))  # metrics add no step records
    assert store.verify_partition(store.partition_dir(logs, "g")) is None


def test_lineage_check_sees_a_changed_metrics_table(tmp_path):
    logs = tmp_path / "logs"
    log = RolloutLog(logs, "g")
    log.append(_rows(1), step=1)
    log.flush()
    metrics = train_metrics.TrainMetricsLog(logs, "g", writer=log)
    metrics.on_log(None, _state(1), None, logs={"loss": 0.5})
    part = store.partition_dir(logs, "g")
    assert store.verify_partition(part) is None
    path = train_metrics.side_table_path(logs, "g")
    path.write_text(path.read_text().replace("0.5", "0.25"))
    assert store.verify_partition(part) == "side table train_metrics changed"
    path.unlink()
    assert store.verify_partition(part) == "side table train_metrics missing"


def test_metrics_before_the_first_commit_are_listed_by_it(tmp_path):
    logs = tmp_path / "logs"
    log = RolloutLog(logs, "g")
    metrics = train_metrics.TrainMetricsLog(logs, "g", writer=log)
    metrics.on_log(None, _state(1), None, logs={"loss": 0.5})
    assert store.run_manifest(logs, "g") is None  # no run yet: nothing to list it in
    log.append(_rows(1), step=1)
    log.flush()
    listed = store.run_manifest(logs, "g")["side_tables"]["train_metrics"]
    assert listed["rows"] == 1
    # a later rollout commit keeps the listing
    log.append(_rows(2), step=2)
    log.flush()
    assert store.run_manifest(logs, "g")["side_tables"]["train_metrics"] == listed
    assert store.verify_partition(store.partition_dir(logs, "g")) is None


def test_a_torn_last_line_is_cut_before_the_next_append(tmp_path):
    side = SideLog.open(tmp_path, "r", "t")
    side.append({"step": 1})
    path = side_path(tmp_path, "t", "r")
    with open(path, "a") as f:
        f.write('{"step": 2, "lo')  # a killed append
    assert read_rows(tmp_path, "t", "r") == [{"step": 1}]
    again = SideLog.open(tmp_path, "r", "t")
    again.append({"step": 2})
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
