"""What every funnel step shares: inputs hashed once per run, in a thread when forced."""

from __future__ import annotations

import hashlib

import pyarrow as pa
from support.funnel_data import group, write_log

from ddai.pipelines import store
from ddai.pipelines.funnel import step
from ddai.pipelines.store import io, manifest


def _world(tmp_path):
    inputs = []
    for name, body in (("a.txt", "alpha"), ("b.txt", "beta")):
        p = tmp_path / name
        p.write_text(body)
        inputs.append(p)
    outputs = [tmp_path / f"out{i}.parquet" for i in range(3)]
    return inputs, outputs


def _commit(outputs, begun):
    manifest.commit_set(
        [step.table_output(o, pa.table({"id": ["x"]}), begun.record()) for o in outputs]
    )


def test_forced_start_records_the_inputs_hashes(tmp_path):
    inputs, outputs = _world(tmp_path)
    with step.started("demo", {"k": 1}, inputs, force=True, outputs=outputs) as begun:
        assert begun.skip is False
        record = begun.record()
    assert record.inputs == [manifest.input_record(p) for p in inputs]
    assert record.step == "demo" and record.params == {"k": 1}


def test_inputs_are_hashed_once_for_every_output(tmp_path, monkeypatch):
    inputs, outputs = _world(tmp_path)
    with step.started("demo", {"k": 1}, inputs, force=True, outputs=outputs) as begun:
        _commit(outputs, begun)
    calls = []
    real = manifest.input_record
    monkeypatch.setattr(manifest, "input_record", lambda p: calls.append(p) or real(p))
    with step.started("demo", {"k": 1}, inputs, force=False, outputs=outputs) as begun:
        assert begun.skip is True
    # each input once, not once per output (each output is re-hashed to verify it)
    assert sorted(c for c in calls if c in inputs) == sorted(inputs)
    assert sorted(c for c in calls if c not in inputs) == sorted(outputs)


def test_a_changed_input_or_parameter_is_not_fresh(tmp_path):
    inputs, outputs = _world(tmp_path)
    with step.started("demo", {"k": 1}, inputs, force=True, outputs=outputs) as begun:
        _commit(outputs, begun)
    with step.started("demo", {"k": 2}, inputs, force=False, outputs=outputs) as begun:
        assert begun.skip is False
    inputs[0].write_text("changed")
    with step.started("demo", {"k": 1}, inputs, force=False, outputs=outputs) as begun:
        assert begun.skip is False
        assert begun.record().inputs[0]["sha256"] == manifest.input_record(inputs[0])["sha256"]


def test_a_first_run_hashes_its_inputs_once(tmp_path, monkeypatch):
    inputs, outputs = _world(tmp_path)
    calls = []
    real = manifest.input_record
    monkeypatch.setattr(manifest, "input_record", lambda p: calls.append(p) or real(p))
    with step.started("demo", {"k": 1}, inputs, force=False, outputs=outputs) as begun:
        assert begun.skip is False
        assert begun.record().inputs == [real(p) for p in inputs]
    assert sorted(calls) == sorted(inputs)  # no outputs yet: nothing compared, hashed once


def test_a_log_partition_is_recorded_from_its_manifest_without_reading_its_parts(
    tmp_path, monkeypatch
):
    # its parts are immutable and hashed at their commit: a step reads the recorded digests
    part = write_log(tmp_path / "logs", "r1", group("p1", "reward", [0.0, 1.0]))
    store.write_run(tmp_path / "logs", "r1", group("p2", "reward", [0.5]), append=True)
    full = manifest.input_record(part, rehash=True)
    files = store.committed_files(part)
    assert full["files"] == len(files) == 2
    assert full["sha256"] == store.files_digest(
        [{"name": f.name, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files]
    )
    read = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p, *a: read.append(p) or real(p, *a))
    assert manifest.input_record(part) == full
    assert read == []
    # lineage --check re-reads every part: an edit in place changes the digest
    with open(files[0], "ab") as fh:
        fh.write(b"x")
    assert manifest.input_record(part, rehash=True)["sha256"] != full["sha256"]
    assert sorted(read) == sorted(files)


def test_the_provenance_is_looked_up_in_the_steps_thread_and_recorded(tmp_path, monkeypatch):
    """``git rev-parse`` and the package versions run beside the step's work (a thread), once,
    and the committed manifests carry them."""
    import threading

    inputs, outputs = _world(tmp_path)
    seen: list[str] = []
    real_git, real_packages = manifest.git_revision, manifest.package_versions

    def git() -> str | None:
        seen.append(threading.current_thread().name)
        return real_git()

    monkeypatch.setattr(manifest, "git_revision", git)
    monkeypatch.setattr(manifest, "package_versions", real_packages)
    for force in (True, False):
        seen.clear()
        for o in outputs:
            o.unlink(missing_ok=True)
        with step.started("demo", {"k": 1}, inputs, force=force, outputs=outputs) as begun:
            _commit(outputs, begun)
        # looked up in the pool's thread; the manifests' own lookups came after it
        assert seen and seen[0] != threading.main_thread().name, (force, seen)
        m = manifest.read(outputs[0])
        assert m["git_revision"] == real_git() and m["packages"] == real_packages()
        assert m["packages"]["python"]
