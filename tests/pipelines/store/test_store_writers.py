"""Every writer of a run's data goes through its write lock and the commit protocol: side tables
(committed with the ingest, listed with their hashes in the manifest), training metrics, and the
commands that rewrite a run they read first (``judge --in-place``, ``value score`` in place, a
resumed PPO run), which commit only over the version they read: the last two on local disk and on
object storage alike."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.lazy import heavy
from test_crash_consistency import killed_at
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.backends import rejudge as rejudge_mod
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.trainer.episode.logrows import RolloutLog

train_metrics = heavy("ddai.trainer.runtime.train_metrics")

runner = CliRunner()
RUN = "exp1"
TABLE = "train.step.metrics"


def _event(et: str, step: int, sample: int | None = None, **payload) -> dict:
    e = {"ts": 1.0, "host": "h", "pid": 7, "run_id": RUN, "project_name": "p"}
    e |= {"experiment_name": "exp", "n_agent": 4, "epoch": 0, "event_type": et}
    e["global_step"] = step
    if sample is not None:
        e["sample_idx"] = sample
    return e | payload


def _unified(path: Path, metrics: int, step: int = 1) -> Path:
    """A unified log: one rollout of ``step`` (plan + reward) and ``metrics`` side events."""
    done = "<think>done</think>\n<search_complete>true</search_complete><|im_end|>"
    events = [_event(TABLE, step, metrics={"m": k}) for k in range(metrics)]
    events += [
        _event("model.plan", step, 0, uid="train_5", turn_idx=0, is_last_turn=True, text=done),
        _event(
            "rm.flash.detail", step, 0, uid="train_5", local_idx=0, query="Q?",
            generated_answer="A", reference_answer="A", retrieved_basenames=["5_1"],
            reference_basenames=["5_1"], judge_score=1.0, ndcg=1.0, final_score=1.0,
        ),
    ]  # fmt: skip
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _side(logs: Path) -> Path:
    return logs / store.SIDE_DIR / TABLE / f"{RUN}.jsonl"


def test_manifest_lists_side_tables_with_hashes_and_verify_sees_a_change(tmp_path):
    logs = tmp_path / "logs"
    ingest(IngestConfig([_unified(tmp_path / "a.jsonl", 2)], logs, progress=False))
    man = store.run_manifest(logs, RUN)
    assert man["side_tables"][TABLE]["rows"] == 2
    part = store.partition_dir(logs, RUN)
    assert store.verify_partition(part) is None
    b = _unified(tmp_path / "b.jsonl", 3, step=2)
    ingest(IngestConfig([b], logs, append=True, progress=False))
    man = store.run_manifest(logs, RUN)
    assert man["rollouts_total"] == 2
    assert man["side_tables"][TABLE]["rows"] == 5  # the appended file holds both ingests' rows
    assert len(_side(logs).read_text().splitlines()) == 5
    assert store.verify_partition(part) is None
    with open(_side(logs), "a", encoding="utf-8") as fh:
        fh.write("{}\n")
    assert store.verify_partition(part) == f"side table {TABLE} changed"
    res = runner.invoke(app, ["lineage", str(part), "--check", "--json"])
    assert res.exit_code == 1 and f"side table {TABLE} changed" in res.output


def test_side_tables_wait_for_the_run_lock(tmp_path, capfd):
    logs = tmp_path / "logs"
    src = _unified(tmp_path / "a.jsonl", 2)
    with store.run_lock(logs, RUN):
        t = threading.Thread(target=ingest, args=(IngestConfig([src], logs, progress=False),))
        t.start()
        said = ""
        for _ in range(1000):  # until the ingest says it waits for the lock
            said += capfd.readouterr().err
            if "waiting for the write lock" in said:
                break
            time.sleep(0.01)
        assert f"write lock of run {RUN!r}" in said
        assert not _side(logs).exists() and store.list_runs(logs) == []
    t.join(60)
    assert len(_side(logs).read_text().splitlines()) == 2
    assert store.verify_partition(store.partition_dir(logs, RUN)) is None


@pytest.mark.parametrize("point", [f"side:{TABLE}:{RUN}", f"partition-data:{RUN}"])
def test_reingest_killed_around_side_tables_then_rerun_is_right(tmp_path, point):
    logs = tmp_path / "logs"
    ingest(IngestConfig([_unified(tmp_path / "a.jsonl", 2)], logs, progress=False))
    new = _unified(tmp_path / "b.jsonl", 4)
    killed_at(point, "ingest", str(new), "--logs", str(logs), "--no-progress")
    part = store.partition_dir(logs, RUN)
    assert store.run_manifest(logs, RUN)["side_tables"][TABLE]["rows"] == 2  # the old version
    if point.startswith("side:"):
        # killed before the side table moved in: the old rows, and the spool left behind
        assert len(_side(logs).read_text().splitlines()) == 2
        assert store.verify_partition(part) is None
        assert [p for p in _side(logs).parent.iterdir() if p.name.startswith(".tmp-")]
    else:
        # the side table moved in, the manifest not: --check names it
        assert store.verify_partition(part) == f"side table {TABLE} changed"
    ingest(IngestConfig([new], logs, progress=False))
    assert len(_side(logs).read_text().splitlines()) == 4
    assert store.verify_partition(part) is None
    assert [p.name for p in _side(logs).parent.iterdir()] == [f"{RUN}.jsonl"]  # spool cleaned


def test_train_metrics_are_written_under_the_run_lock(tmp_path):
    logs = tmp_path / "logs"
    log = train_metrics.TrainMetricsLog(logs, "g")
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    with store.run_lock(logs, "g"):
        t = threading.Thread(
            target=log.on_log, args=(None, state, None), kwargs={"logs": {"loss": 0.5}}
        )
        t.start()
        t.join(0.5)
        assert t.is_alive() and not train_metrics.side_table_path(logs, "g").exists()
    t.join(30)
    assert [
        json.loads(x) for x in train_metrics.side_table_path(logs, "g").read_text().splitlines()
    ] == [{"run_id": "g", "step": 1, "loss": 0.5}]


def _rows(n: int, start: int = 0) -> list[dict]:
    return [
        {"uid": f"u{i}", "rollout_idx": 0, "step": 1 + i % 3, "question": "q",
         "reference_answer": "a", "answer": "a", "judge_score": 0.5}
        for i in range(start, start + n)
    ]  # fmt: skip


def test_a_rewrite_commits_only_over_the_version_it_read(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "r", _rows(4))
    table, version = store.read_version(logs, "r")
    store.write_run(logs, "r", _rows(2, start=4), append=True)  # another writer commits
    with pytest.raises(store.StoreConflict, match=r"changed .* nothing was written"):
        store.write_run(logs, "r", table, if_unchanged=version)
    assert store.read_rollouts(logs, ["r"]).num_rows == 6  # the append survives
    assert not [p for p in logs.iterdir() if p.name.startswith(".tmp-")]
    table, version = store.read_version(logs, "r")
    store.write_run(logs, "r", table.slice(0, 3), if_unchanged=version)
    assert store.read_rollouts(logs, ["r"]).num_rows == 3


@pytest.fixture(params=["disk", "s3"])
def logs(request, tmp_path) -> str:
    """A log store on local disk, and one on object storage (moto's S3 server)."""
    if request.param == "s3":
        return f"{request.getfixturevalue('s3_env')}/logs"
    return str(tmp_path / "logs")


def test_judge_in_place_refuses_a_run_appended_to_while_it_judged(logs, monkeypatch):
    store.write_run(logs, "r", _rows(4))
    real = rejudge_mod.run_sync

    def judged_while_an_append_commits(coro):
        out = real(coro)
        store.write_run(logs, "r", _rows(2, start=4), append=True)
        return out

    monkeypatch.setattr(rejudge_mod, "run_sync", judged_while_an_append_commits)
    res = runner.invoke(
        app, ["judge", "--logs", logs, "--run", "r", "--judge", "local", "--in-place"]
    )
    said = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert f"run 'r' changed in {logs}" in said and "nothing was written" in said
    t = store.read_rollouts(logs, ["r"])
    assert t.num_rows == 6 and set(t.column("judge_score").to_pylist()) == {0.5}


def test_resumed_ppo_drops_later_steps_only_over_the_version_it_read(logs, monkeypatch):
    store.write_run(logs, "r", _rows(6))  # steps 1, 2, 3, 1, 2, 3
    assert RolloutLog(logs, "r").drop_after(2) == 2
    assert sorted(store.read_rollouts(logs, ["r"]).column("step").to_pylist()) == [1, 1, 2, 2]
    real = store.read_version

    def read_then_append(logs_, run, columns=None):
        out = real(logs_, run, columns)
        store.write_run(logs, "r", _rows(3, start=10), append=True)
        return out

    monkeypatch.setattr(store, "read_version", read_then_append)
    with pytest.raises(store.StoreConflict, match="run 'r' changed"):
        RolloutLog(logs, "r").drop_after(1)
    assert store.read_rollouts(logs, ["r"]).num_rows == 7


def test_side_rows_of_an_ingest_that_adds_no_rollout_stay_consistent(tmp_path):
    logs = tmp_path / "logs"
    src = _unified(tmp_path / "a.jsonl", 2)
    ingest(IngestConfig([src], logs, progress=False))
    part = store.partition_dir(logs, RUN)
    # the same file appended again is recognised as stored (its hash): nothing added
    res = ingest(IngestConfig([src], logs, append=True, progress=False))
    assert res.already_stored == {RUN: store.run_manifest(logs, RUN)["ingest"]}
    assert res.rows_in == 0 and len(_side(logs).read_text().splitlines()) == 2
    # a log with the same rollout and two more side rows: the rollout is already stored, the
    # side rows are new; a manifest with no new rows commits them (the append is in the history)
    more = _unified(tmp_path / "more.jsonl", 4)
    res = ingest(IngestConfig([more], logs, append=True, progress=False))
    assert res.rollouts_out == 0 and dict(res.quarantined) == {"duplicate of a stored rollout": 1}
    man = store.run_manifest(logs, RUN)
    assert man["rollouts_total"] == 1 and len(man["history"]) == 1
    assert man["side_tables"][TABLE]["rows"] == 6 == len(_side(logs).read_text().splitlines())
    assert store.verify_partition(part) is None
    # a replace whose rollouts are all bad replaces nothing: the run and its side table stay
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_event(TABLE, 1, metrics={"m": 9})) + "\n" + '{"event_type": 3}\n')
    res = ingest(IngestConfig([bad], logs, run_id=RUN, progress=False))
    assert res.rollouts_out == 0
    assert res.summary()["side rows not written (their run got no rollouts)"] == {RUN: 1}
    assert store.run_manifest(logs, RUN) == man
    assert len(_side(logs).read_text().splitlines()) == 6
    assert store.verify_partition(part) is None


def test_side_rows_of_a_run_that_is_not_stored_are_not_written(tmp_path):
    # a log holding only a run's side events (no rollout) used to leave _side/<table>/<run>.jsonl
    # with no manifest listing it: a file no view reads, deleted by the run's next ingest
    logs = tmp_path / "logs"
    side_only = tmp_path / "side.jsonl"
    side_only.write_text(
        "".join(json.dumps(_event(TABLE, 1, metrics={"m": k})) + "\n" for k in range(3))
    )
    for append in (False, True):
        res = ingest(IngestConfig([side_only], logs, append=append, progress=False))
        assert res.rollouts_out == 0 and res.side_tables == {}
        assert res.summary()["side rows not written (their run got no rollouts)"] == {RUN: 3}
        assert not _side(logs).exists() and store.run_manifest(logs, RUN) is None
    # with the run's rollouts the same side rows are written and listed
    res = ingest(IngestConfig([_unified(tmp_path / "a.jsonl", 3)], logs, progress=False))
    assert res.side_tables == {TABLE: 3} and not res.side_not_written
    assert store.run_manifest(logs, RUN)["side_tables"][TABLE]["rows"] == 3
