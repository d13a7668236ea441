"""The commands that rewrite or extend a run work on a log store on object storage (moto's S3
server): ``judge --in-place``, a resumed trainer dropping later steps, the training rollout log
and its metrics side table. Each commits with the conditional manifest put, only over the version
it read (the lost races, a run appended to meanwhile, are tested on disk and on object storage by
``test_store_writers``)."""

from __future__ import annotations

from types import SimpleNamespace

from support.lazy import heavy
from test_store_writers import _rows
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import objstore
from ddai.pipelines.store.side_log import read_rows
from ddai.trainer.episode.logrows import RolloutLog

train_metrics = heavy("ddai.trainer.runtime.train_metrics")

runner = CliRunner()


def test_judge_in_place_rewrites_a_run_on_object_storage(s3_env):
    logs = f"{s3_env}/logs"
    store.write_run(logs, "r", _rows(4))
    res = runner.invoke(
        app, ["judge", "--logs", logs, "--run", "r", "--judge", "local", "--in-place", "--json"]
    )
    assert res.exit_code == 0, res.output
    t = store.read_rollouts(logs, ["r"])
    # the local judge scores answer "a" against reference "a": every rollout is correct now
    assert t.num_rows == 4 and set(t.column("judge_score").to_pylist()) == {1.0}
    assert store.verify_partition(store.partition_dir(logs, "r")) is None


def test_the_training_rollout_log_and_metrics_go_to_object_storage(s3_env):
    logs = f"{s3_env}/logs"
    log = RolloutLog(logs, "g")  # as the trainers build it from --logs
    for step in (1, 2):
        rows = [r | {"step": step, "reward": 1.0, "extra": {}} for r in _rows(2)]
        log.append(rows)
    man = store.run_manifest(logs, "g")
    assert man["rollouts_total"] == 4 and len(man["files"]) == 2 and log.rows == 4
    metrics = train_metrics.TrainMetricsLog(logs, "g")
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    metrics.on_log(None, state, None, logs={"loss": 0.5})
    state.global_step = 2
    metrics.on_log(None, state, None, logs={"loss": 0.25, "reward": 1.0})
    # one part object per logged step, listed in order in the manifest, read back as one table
    parts = store.run_manifest(logs, "g")["side_tables"]["train_metrics"]["parts"]
    assert [p["rows"] for p in parts] == [1, 1]
    assert all(p["name"].startswith("g/part-") for p in parts)
    assert read_rows(logs, "train_metrics", "g") == [
        {"run_id": "g", "step": 1, "loss": 0.5},
        {"run_id": "g", "step": 2, "loss": 0.25, "reward": 1.0},
    ]
    assert not objstore.exists(
        objstore.url_of(train_metrics.side_table_path(logs, "g"))
    )  # no whole table
    # a resumed run reads the steps back from the store
    assert [r["step"] for r in train_metrics.TrainMetricsLog(logs, "g").rows] == [1, 2]


def test_training_metrics_on_object_storage_are_listed_with_their_hash(s3_env):
    logs = f"{s3_env}/logs"
    log = RolloutLog(logs, "g")
    metrics = train_metrics.TrainMetricsLog(logs, "g", writer=log)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    metrics.on_log(None, state, None, logs={"loss": 0.5})  # before the run's first commit
    log.append([r | {"step": 1, "reward": 1.0, "extra": {}} for r in _rows(2)], step=1)
    log.flush()
    part = store.partition_dir(logs, "g")
    assert store.run_manifest(logs, "g")["side_tables"]["train_metrics"]["rows"] == 1
    state.global_step = 2
    metrics.on_log(None, state, None, logs={"loss": 0.25})  # listed by a conditional put
    assert store.run_manifest(logs, "g")["side_tables"]["train_metrics"]["rows"] == 2
    assert store.verify_partition(part) is None
    second = store.run_manifest(logs, "g")["side_tables"]["train_metrics"]["parts"][1]["name"]
    url = f"{logs}/_side/train_metrics/{second}"
    objstore.put_bytes(url, objstore.read_bytes(url).replace(b"0.25", b"0.5"))
    assert store.verify_partition(part) == f"side table train_metrics part {second} changed"
