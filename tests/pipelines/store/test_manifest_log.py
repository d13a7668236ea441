"""The manifest log (issue 17): a commit writes one small delta (``_log/<seq>.json``, the commit
point), ``_manifest.json`` is a checkpoint rewritten geometrically; readers fold checkpoint and
deltas into exactly the manifest the previous code wrote (``tests/support/old_manifest``)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading

import pytest
from support.old_manifest import old_commit, old_file

from ddai.pipelines import store
from ddai.pipelines.store import manifest_log, objstore
from ddai.pipelines.store.side_log import SideLog

RUN = "train"


def _rows(step: int, n: int = 2) -> list[dict]:
    return [{"uid": f"u{i}", "rollout_idx": i, "step": step, "reward": 0.5} for i in range(n)]


def _log_names(logs, run: str = RUN) -> list[str]:
    part = store.partition_dir(logs, run)
    url = objstore.url_of(part)
    if url is not None:
        return objstore.listdir(objstore.join(url, store.LOG_DIR))
    log = part / store.LOG_DIR
    return sorted(os.listdir(log)) if log.is_dir() else []


# ------------------------------------------------------------------------------ diff / apply


def test_a_delta_holds_only_what_changed_and_applies_back():
    old = {
        "files": [{"name": "a", "rows": 1}],
        "rollouts_total": 1,
        "caps": {"judge": 1, "turns": 0},
        "gone": "x",
        "tags": ["p", "q"],
    }
    new = {
        "files": [{"name": "a", "rows": 1}, {"name": "b", "rows": 2}],
        "rollouts_total": 3,
        "caps": {"judge": 3, "turns": 0},
        "tags": ["q"],
        "added": None,
    }
    d = manifest_log.diff(old, new)
    assert d == {
        "set": {"rollouts_total": 3, "tags": ["q"], "added": None},
        "del": ["gone"],
        "ext": {"files": [{"name": "b", "rows": 2}]},  # a list that only grew: its tail
        "sub": {"caps": {"set": {"judge": 3}}},  # a nested dict: its own delta
    }
    assert manifest_log.apply(old, d) == new
    assert old["files"] == [{"name": "a", "rows": 1}]  # the base is left as it was
    assert manifest_log.diff(new, new) == {}


def test_json_types_are_told_apart():
    # 1, 1.0 and true are equal in Python but differ in the file: the delta keeps the new one
    for old, new in ((1, True), (1, 1.0), ([1], [True]), ({"a": 0}, {"a": False})):
        d = manifest_log.diff({"k": old}, {"k": new})
        out = manifest_log.apply({"k": old}, d)
        assert json.dumps(out) == json.dumps({"k": new}), (old, new, d)


# ------------------------------------------------------------------------------ fold equality


def _commits(logs) -> None:
    """Appends, replaces, side-table and metrics commits of one run."""
    store.write_run(logs, RUN, _rows(1))  # a new run: a new chain
    store.write_run(logs, RUN, _rows(2), append=True, sources=[{"path": "s2.jsonl"}])
    metrics = SideLog.open(logs, RUN, "train_metrics")
    metrics.append({"step": 1, "loss": 0.5})
    store.write_run(logs, RUN, _rows(3, 3), append=True, manifest={"ingest": "i3"})
    metrics.append({"step": 2, "loss": 0.25})
    metrics.append({"step": 2, "loss": 0.2}, keep=[{"step": 1, "loss": 0.5}])  # a resume
    store.write_run(logs, RUN, _rows(4))  # a replace: a new chain
    store.write_run(logs, RUN, _rows(5), append=True)
    SideLog.open(logs, RUN, "train_metrics").append({"step": 5, "loss": 0.1})


def _check_fold_equals_old_writer(logs, monkeypatch) -> list[dict]:
    written: list[dict] = []
    real = manifest_log.commit

    def commit(part, new, state, **kw):
        done = real(part, new, state, **kw)
        # what the previous code wrote for this commit, against what readers now fold (a
        # remote write commits into its local staging store first: that one is checked too)
        assert store.partition_manifest(part) == old_file(new)
        if objstore.url_of(part) == objstore.url_of(store.partition_dir(logs, RUN)):
            written.append(old_file(new))
        return done

    monkeypatch.setattr(manifest_log, "commit", commit)
    _commits(logs)
    return written


def test_the_folded_manifest_is_what_the_old_writer_wrote(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    written = _check_fold_equals_old_writer(logs, monkeypatch)
    assert len(written) == 9 == len(_log_names(logs))
    final = store.run_manifest(logs, RUN)
    assert final["rollouts_total"] == 4 and len(final["history"]) == 1  # since the replace
    assert final["side_tables"]["train_metrics"]["rows"] == 3
    # a fresh reader (no state kept between calls) folds the same
    assert json.loads(json.dumps(final)) == written[-1]


def test_the_folded_manifest_is_what_the_old_writer_wrote_on_object_storage(store_env, monkeypatch):
    logs = f"{store_env}/logs"
    written = _check_fold_equals_old_writer(logs, monkeypatch)
    assert len(written) == 9 == len(_log_names(logs))
    assert store.run_manifest(logs, RUN)["side_tables"]["train_metrics"]["rows"] == 3
    assert store.read_rollouts(logs, [RUN]).num_rows == 4


# ------------------------------------------------------------------------------ bytes and checkpoints


def _sizes(part) -> dict[str, int]:
    return {
        str(p.relative_to(part)): p.stat().st_size
        for p in [part / store.MANIFEST, *(part / store.LOG_DIR).glob("*.json")]
        if p.is_file()
    }


def test_bytes_per_commit_stay_flat_and_checkpoints_are_geometric(tmp_path):
    logs = tmp_path / "logs"
    part = store.partition_dir(logs, RUN)
    per_commit, checkpoints = [], []
    seen: dict[str, int] = {}
    for step in range(1, 121):
        ck_before = (part / store.MANIFEST).stat().st_mtime_ns if part.is_dir() else None
        store.write_run(logs, RUN, _rows(step), append=True)
        sizes = _sizes(part)
        new = {k: v for k, v in sizes.items() if k not in seen and k != store.MANIFEST}
        assert len(new) == 1  # one delta per commit
        per_commit.append(sum(new.values()))
        seen.update(new)
        if (part / store.MANIFEST).stat().st_mtime_ns != ck_before:
            checkpoints.append((step, sizes[store.MANIFEST]))
        state = manifest_log.read_state(part)
        # the rule: the deltas after the checkpoint never outweigh it
        assert state.delta_bytes <= state.checkpoint_bytes
        assert state.seq == step
    # a delta's size does not grow with the run (quadratic bytes would)
    first, last = per_commit[1:11], per_commit[-10:]
    # (a few bytes vary: wider step numbers, the time written when the second changes)
    assert max(last) <= max(first) + 64 and sum(last) / 10 <= sum(first) / 10 + 32, (first, last)
    # checkpoints get rarer as the run grows: each is written once the deltas since the last
    # outweigh it, so the step gaps grow about geometrically and stay few
    steps = [s for s, _ in checkpoints]
    assert steps[0] == 1 and 4 <= len(steps) <= 12, steps
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert gaps[-1] > gaps[0], gaps
    total = sum(per_commit) + sum(size for _, size in checkpoints)
    final = len(json.dumps(store.run_manifest(logs, RUN), indent=2))
    assert total < 6 * final, (total, final)  # linear: a few times the manifest, not steps×


def test_a_replace_starts_a_new_chain(tmp_path):
    logs = tmp_path / "logs"
    for step in range(1, 5):
        store.write_run(logs, RUN, _rows(step), append=True)
    store.write_run(logs, RUN, _rows(9, 3))
    state = manifest_log.read_state(store.partition_dir(logs, RUN))
    assert (state.seq, state.checkpoint_seq, state.delta_bytes) == (5, 5, 0)
    assert state.manifest["rollouts_total"] == 3 and "history" not in state.manifest


# ------------------------------------------------------------------------------ old stores


def _old_store(logs, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        m.setattr(manifest_log, "commit", old_commit)
        store.write_run(logs, RUN, _rows(1))
        store.write_run(logs, RUN, _rows(2), append=True)
        SideLog.open(logs, RUN, "train_metrics").append({"step": 2, "loss": 0.5})
    assert _log_names(logs) == []  # only _manifest.json, as the previous code wrote
    return store.run_manifest(logs, RUN)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_store_written_before_the_log_reads_as_before_and_is_continued(
    where, tmp_path, monkeypatch, request
):
    logs = tmp_path / "logs" if where == "local" else f"{request.getfixturevalue('s3_env')}/l"
    old = _old_store(logs, monkeypatch)
    assert old["rollouts_total"] == 4 and "_log_seq" not in old
    assert store.list_runs(logs) == [RUN]
    before = objstore.any_read_text(store.partition_dir(logs, RUN) / store.MANIFEST)
    store.write_run(logs, RUN, _rows(3), append=True)
    SideLog.open(logs, RUN, "train_metrics").append({"step": 3, "loss": 0.25})
    # continued: the first new commits are deltas 1 and 2 over the old file, left as it was
    assert _log_names(logs) == [manifest_log.delta_name(1), manifest_log.delta_name(2)]
    after = objstore.any_read_text(store.partition_dir(logs, RUN) / store.MANIFEST)
    assert after == before
    man = store.run_manifest(logs, RUN)
    assert man["rollouts_total"] == 6 and len(man["files"]) == 3 and len(man["history"]) == 2
    assert man["side_tables"]["train_metrics"]["rows"] == 2
    assert store.read_rollouts(logs, [RUN]).num_rows == 6
    assert store.verify_partition(store.partition_dir(logs, RUN)) is None


# ------------------------------------------------------------------------------ concurrency


def test_a_second_create_of_the_same_number_is_a_conflict(tmp_path):
    part = tmp_path / "run_id=r"
    state = manifest_log.read_state(part)
    manifest_log.commit(part, {"a": 1}, state)
    with pytest.raises(objstore.ConflictError):
        manifest_log.commit(part, {"a": 2}, state)  # a writer that read before the first
    assert store.run_manifest(tmp_path, "r") == {"a": 1}
    assert os.listdir(part / store.LOG_DIR) == ["0" * 19 + "1.json"]  # no temp left either


def test_a_second_create_of_the_same_number_is_a_conflict_on_object_storage(store_env):
    part = f"{store_env}/logs/run_id=r"
    state = manifest_log.read_state(part)
    manifest_log.commit(part, {"a": 1}, state)
    with pytest.raises(objstore.ConflictError):
        manifest_log.commit(part, {"a": 2}, state)
    assert store.run_manifest(f"{store_env}/logs", "r") == {"a": 1}


_WRITER = (
    "import sys; from ddai.pipelines import store; who = int(sys.argv[2])\n"
    "for k in range(int(sys.argv[3])):\n"
    "    rows = [{'uid': f'u{i}', 'rollout_idx': i, 'step': who * 100 + k} for i in range(2)]\n"
    "    store.write_run(sys.argv[1], 'train', rows, append=True)\n"
)


def _race(logs, n: int) -> None:
    if not objstore.is_url(logs):  # two processes (a store's temp claims are per process)
        procs = [
            subprocess.Popen([sys.executable, "-c", _WRITER, str(logs), str(w), str(n)])
            for w in (1, 2)
        ]
        assert [p.wait(timeout=300) for p in procs] == [0, 0]
        return
    errors: list[BaseException] = []

    def writer(who: int) -> None:
        try:
            for k in range(n):
                step = who * 100 + k
                store.write_run(logs, RUN, _rows(step), append=True)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_writers_appending_at_once_both_land(where, tmp_path, request):
    logs = tmp_path / "logs" if where == "local" else f"{request.getfixturevalue('s3_env')}/l"
    _race(logs, 4)
    man = store.run_manifest(logs, RUN)
    assert len(man["files"]) == 8 and man["rollouts_total"] == 16  # no delta lost
    assert len(man["history"]) == 7
    assert manifest_log.read_state(store.partition_dir(logs, RUN)).seq == 8
    steps = sorted(set(store.read_rollouts(logs, [RUN], ["step"]).column("step").to_pylist()))
    assert steps == [100, 101, 102, 103, 200, 201, 202, 203]


# ------------------------------------------------------------------------------ crashes, gaps


def test_a_crash_between_delta_and_checkpoint_leaves_a_readable_store(tmp_path):
    logs = tmp_path / "logs"
    for step in (1, 2):
        store.write_run(logs, RUN, _rows(step), append=True)
    code = (
        "import sys; from ddai.pipelines import store; "
        "store.write_run(sys.argv[1], 'train', "
        "[{'uid': 'n', 'rollout_idx': 0, 'step': 7, 'reward': 1.0}])"  # a replace: checkpoints
    )
    env = {**os.environ, "DDAI_TEST_CRASH_AT": f"manifest-checkpoint:{RUN}"}
    res = subprocess.run([sys.executable, "-c", code, str(logs)], env=env, timeout=120)
    assert res.returncode == -9
    part = store.partition_dir(logs, RUN)
    checkpoint = json.loads((part / store.MANIFEST).read_text())
    assert checkpoint["_log_seq"] == 1  # the crash came before the new checkpoint
    man = store.run_manifest(logs, RUN)  # ... yet the commit (delta 3) stands
    assert man["rollouts_total"] == 1 and manifest_log.read_state(part).seq == 3
    assert store.read_rollouts(logs, [RUN]).column("uid").to_pylist() == ["n"]
    store.write_run(logs, RUN, _rows(8), append=True)  # the next commit continues the log
    assert manifest_log.read_state(part).seq == 4
    assert store.run_manifest(logs, RUN)["rollouts_total"] == 3
    assert store.verify_partition(part) is None


def test_a_gap_in_the_log_is_an_error_naming_the_run(tmp_path):
    logs = tmp_path / "logs"
    part = store.partition_dir(logs, RUN)
    step = 0
    while (state := manifest_log.read_state(part)).seq - state.checkpoint_seq < 2:
        step += 1
        store.write_run(logs, RUN, _rows(step), append=True)
    assert json.loads((part / store.MANIFEST).read_text())["_log_seq"] == state.checkpoint_seq
    gone = state.checkpoint_seq + 1
    (part / store.LOG_DIR / manifest_log.delta_name(gone)).unlink()
    with pytest.raises(manifest_log.ManifestLogGap, match=rf"run 'train'.*misses commit {gone}"):
        store.run_manifest(logs, RUN)
    assert f"misses commit {gone}" in store.verify_partition(part)


def test_a_delta_under_another_number_is_refused(tmp_path):
    logs = tmp_path / "logs"
    for step in range(1, 3):
        store.write_run(logs, RUN, _rows(step), append=True)
    log = store.partition_dir(logs, RUN) / store.LOG_DIR
    (log / manifest_log.delta_name(2)).write_text(json.dumps({"seq": 5, "set": {"x": 1}}))
    with pytest.raises(manifest_log.ManifestLogGap, match="holds another commit"):
        store.run_manifest(logs, RUN)


# ------------------------------------------------------------------------------ incremental reads


def test_a_reader_fetches_only_the_deltas_committed_since_its_last_read(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    part = store.partition_dir(logs, RUN)
    for step in range(1, 30):
        store.write_run(logs, RUN, _rows(step), append=True)
    store.run_manifest(logs, RUN)
    read: list[list[int]] = []
    real = manifest_log._read_deltas
    monkeypatch.setattr(
        manifest_log, "_read_deltas", lambda p, u, s: read.append(list(s)) or real(p, u, s)
    )
    state = manifest_log.read_state(part)
    store.write_run(logs, RUN, _rows(30), append=True)
    assert store.run_manifest(logs, RUN)["rollouts_total"] == 60
    # the first read had every delta it needed already; the commit and the reads after it
    # fetch just the new one, once (or none, when that commit wrote a checkpoint)
    assert read[0] == [] and [s for r in read for s in r] in ([state.seq + 1], [])


def test_a_taken_back_commit_whose_number_is_reused_is_not_read_from_memory(tmp_path):
    logs = tmp_path / "logs"
    part = store.partition_dir(logs, RUN)
    step = 0
    while step < 10 or (state := manifest_log.read_state(part)).seq == state.checkpoint_seq:
        step += 1  # until the last commit wrote a delta only
        store.write_run(logs, RUN, _rows(step), append=True)
    last = part / store.LOG_DIR / manifest_log.delta_name(state.seq)
    last.unlink()  # a rolled-back commit (the journal removes its delta) ...
    assert store.run_manifest(logs, RUN)["rollouts_total"] == 2 * step - 2
    # ... and another commit takes its number: the reader folds the new one, not its memory
    prev = manifest_log.read_state(part)
    manifest_log.commit(part, {**prev.manifest, "note": "other"}, prev)
    man = store.run_manifest(logs, RUN)
    assert man["note"] == "other" and man["rollouts_total"] == 2 * step - 2
    assert manifest_log.read_state(part).seq == state.seq


def test_an_s3_reader_lists_only_the_log_after_what_it_folded(s3_env, monkeypatch):
    logs = f"{s3_env}/l"
    part = f"{logs}/run_id={RUN}"
    for step in range(1, 9):
        store.write_run(logs, RUN, _rows(step), append=True)
    state = manifest_log.read_state(part)
    listed: list[dict[int, object]] = []
    real = manifest_log._list_ids

    def list_ids(url, after=0):
        listed.append(real(url, after))
        return listed[-1]

    monkeypatch.setattr(manifest_log, "_list_ids", list_ids)
    store.write_run(logs, RUN, _rows(9), append=True)
    assert store.run_manifest(logs, RUN)["rollouts_total"] == 18
    # every listing starts at the last delta folded (or the checkpoint): at most two entries
    assert listed and all(len(ids) <= 2 for ids in listed), listed
    assert max(s for ids in listed for s in ids) == state.seq + 1
