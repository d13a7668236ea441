"""What every funnel step shares: inputs hashed once per run, in a thread when forced."""

from __future__ import annotations

import pyarrow as pa

from ddai.pipelines.funnel import step
from ddai.pipelines.store import manifest


def _world(tmp_path):
    inputs = []
    for name, body in (("a.txt", "alpha"), ("b.txt", "beta")):
        p = tmp_path / name
        p.write_text(body)
        inputs.append(p)
    outputs = [tmp_path / f"out{i}.parquet" for i in range(3)]
    return inputs, outputs


def _commit(outputs, begun):
    step.commit([step.table_output(o, pa.table({"id": ["x"]}), begun.record()) for o in outputs])


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
