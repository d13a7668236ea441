"""A run's growing side table on object storage (S3 on moto, GCS on the fake server): each append
puts only its new rows, as one part object listed in the manifest, so a long run writes O(steps)
side-table bytes, not the whole table every step; every reader (the report's training section,
``read_rows``) reads the parts back as the table the same run writes on a local store, and
``lineage --check`` catches a changed part."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.lazy import heavy
from test_side_log import _rows
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import objstore, side_log
from ddai.reports.sections import training
from ddai.trainer.episode.logrows import RolloutLog

train_metrics = heavy("ddai.trainer.runtime.train_metrics")

STEPS = 30


def _train(logs: str, steps: range) -> train_metrics.TrainMetricsLog:
    """A training run as the GRPO trainer logs it: each step's rollouts, then its metrics."""
    log = RolloutLog(logs, "g")
    metrics = train_metrics.TrainMetricsLog(logs, "g", writer=log)
    for step in steps:
        log.append(_rows(step), step=step)
        state = SimpleNamespace(is_world_process_zero=True, global_step=step)
        metrics.on_log(None, state, None, logs={"loss": 1 / step, "reward": float(step)})
    log.flush()
    return metrics


def _count_puts(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Bytes sent per object URL (every put of the store goes through these two calls)."""
    sent: Counter = Counter()
    put_bytes, put_file = objstore.put_bytes, objstore.put_file

    def count_bytes(url, data, **kw):
        sent[url] += len(data)
        return put_bytes(url, data, **kw)

    def count_file(local, url):
        sent[url] += os.path.getsize(local)
        return put_file(local, url)

    monkeypatch.setattr(objstore, "put_bytes", count_bytes)
    monkeypatch.setattr(objstore, "put_file", count_file)
    return sent


def test_a_long_run_puts_each_metrics_row_once_and_reads_back_as_the_local_run(
    store_env, tmp_path, monkeypatch
):
    local = str(tmp_path / "logs")
    _train(local, range(1, STEPS + 1))
    logs = f"{store_env}/logs"
    sent = _count_puts(monkeypatch)
    _train(logs, range(1, STEPS + 1))
    side = {u: n for u, n in sent.items() if "/_side/" in u}
    # one object per step, and exactly the bytes the local run appended: O(steps) in total
    # (putting the table whole every step would send about STEPS / 2 times as much)
    assert len(side) == STEPS
    assert sum(side.values()) == train_metrics.side_table_path(local, "g").stat().st_size
    rec = store.run_manifest(logs, "g")["side_tables"][train_metrics.TABLE]
    assert rec["rows"] == STEPS and [p["rows"] for p in rec["parts"]] == [1] * STEPS
    # the part lists stay out of the manifest's history (it would grow quadratically)
    assert all("parts" not in h.get("side_tables", {}).get(train_metrics.TABLE, {}) for h in
               store.run_manifest(logs, "g")["history"])  # fmt: skip
    assert side_log.read_rows(logs, train_metrics.TABLE, "g") == side_log.read_rows(
        local, train_metrics.TABLE, "g"
    )
    assert [r["step"] for r in side_log.read_rows(logs, train_metrics.TABLE, "g")] == list(
        range(1, STEPS + 1)
    )
    remote_frame = training.load(logs, ["g"])["g"]
    assert remote_frame.equals(training.load(local, ["g"])["g"])
    assert store.verify_partition(store.partition_dir(logs, "g")) is None


def test_lineage_check_catches_a_changed_part(store_env):
    logs = f"{store_env}/logs"
    _train(logs, range(1, 4))
    part = store.partition_dir(logs, "g")
    res = CliRunner().invoke(app, ["lineage", f"{logs}/run_id=g", "--check", "--json"])
    assert res.exit_code == 0, res.output
    name = store.run_manifest(logs, "g")["side_tables"][train_metrics.TABLE]["parts"][1]["name"]
    url = side_log.part_url(logs, train_metrics.TABLE, name)
    objstore.put_bytes(url, objstore.read_bytes(url).replace(b'"step": 2', b'"step": 9'))
    assert store.verify_partition(part) == f"side table {train_metrics.TABLE} part {name} changed"
    res = CliRunner().invoke(app, ["lineage", f"{logs}/run_id=g", "--check", "--json"])
    assert (
        res.exit_code == 1 and f"side table {train_metrics.TABLE} part {name} changed" in res.output
    )
    objstore.remove(url)
    assert store.verify_partition(part) == f"side table {train_metrics.TABLE} part {name} missing"


def test_a_resumed_run_lists_one_rewritten_part_and_collects_the_rest(
    store_env, tmp_path, monkeypatch
):
    for logs in (str(tmp_path / "logs"), f"{store_env}/logs"):
        _train(logs, range(1, 6))
        _train(logs, range(3, 5))  # resumed from the checkpoint of step 2: steps 3, 4 again
    logs = f"{store_env}/logs"
    steps = [r["step"] for r in side_log.read_rows(logs, train_metrics.TABLE, "g")]
    assert steps == [1, 2, 3, 4]  # step 5 of the first attempt gave way
    assert side_log.read_rows(logs, train_metrics.TABLE, "g") == side_log.read_rows(
        tmp_path / "logs", train_metrics.TABLE, "g"
    )
    parts = [
        p["name"]
        for p in store.run_manifest(logs, "g")["side_tables"][train_metrics.TABLE]["parts"]
    ]
    assert len(parts) == 2  # steps 1-3 rewritten once, then step 4 appended
    folder = f"{logs}/_side/{train_metrics.TABLE}/g"
    assert len(objstore.listdir(folder)) > 2  # superseded parts wait out the grace period
    monkeypatch.setenv(store.GRACE_ENV, "0")
    listed = store.run_manifest(logs, "g")["side_tables"]
    removed = store.collect_remote_side_garbage(logs, "g", listed)
    assert len(removed) == 5 and objstore.listdir(folder) == sorted(p.split("/")[1] for p in parts)
    assert side_log.read_rows(logs, train_metrics.TABLE, "g") == side_log.read_rows(
        tmp_path / "logs", train_metrics.TABLE, "g"
    )


def test_an_appending_ingest_adds_a_side_table_part(store_env, tmp_path):
    from ddai.pipelines.ingest import IngestConfig, ingest

    root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    src = os.path.join(root, "fixtures/unified/focused_r2/unified_trajectory.jsonl")
    # appended: the same log with a blank line more (the same file would be recognised as
    # stored already, adding nothing)
    again = tmp_path / "again.jsonl"
    again.write_bytes(Path(src).read_bytes() + b"\n")
    local, logs = tmp_path / "logs", f"{store_env}/logs"
    for where in (local, logs):
        for append in (False, True):
            ingest(
                IngestConfig(
                    [again if append else src], where, run_id="u", append=append, progress=False
                )
            )
    man = store.run_manifest(logs, "u")
    table, rec = sorted(man["side_tables"].items())[0]
    assert len(rec["parts"]) == 2 and rec["parts"][0]["rows"] == rec["parts"][1]["rows"]
    assert side_log.read_rows(logs, table, "u") == side_log.read_rows(local, table, "u")
    assert json.loads(side_log.read_bytes(logs, table, "u").splitlines()[0])
    assert store.verify_partition(store.partition_dir(logs, "u")) is None
    # a replace lists only its own part; the appended ones are no longer read
    ingest(IngestConfig([src], logs, run_id="u", progress=False))
    (only,) = store.run_manifest(logs, "u")["side_tables"][table]["parts"]
    assert only["rows"] == rec["parts"][0]["rows"] == len(side_log.read_rows(logs, table, "u"))


def test_a_listing_that_loses_every_race_raises_and_lists_nothing(s3_env, monkeypatch):
    logs = f"{s3_env}/logs"
    metrics = _train(logs, range(1, 3))
    listed = store.run_manifest(logs, "g")["side_tables"][train_metrics.TABLE]
    real_put = objstore.put_bytes

    def put(url, data, **kw):
        if f"/{store.LOG_DIR}/" in url:  # another writer wins each commit (the log's delta)
            raise objstore.ConflictError(f"{url} was changed by another writer")
        return real_put(url, data, **kw)

    monkeypatch.setattr(objstore, "put_bytes", put)
    state = SimpleNamespace(is_world_process_zero=True, global_step=3)
    with pytest.raises(store.StoreConflict, match=r"run 'g' at .*concurrent commits in a row beat"):
        metrics.on_log(None, state, None, logs={"loss": 0.1})
    assert store.run_manifest(logs, "g")["side_tables"][train_metrics.TABLE] == listed  # as it was
    assert [r["step"] for r in side_log.read_rows(logs, train_metrics.TABLE, "g")] == [1, 2]
