"""A multi-run ``ddai ingest`` is all or nothing, on a local store and on object storage (S3 on
moto, GCS on the fake server): every run is checked before any is committed, so a refused third
run leaves the store byte for byte as it was, and the error names that run's input and the fix;
a commit that still fails late rolls back the runs this command committed before it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import objstore

RESP = "<think>t</think>\n<search>q</search><think>d</think><search_complete>true</search_complete>"
RUNS = ("r1", "r2", "r3")


@pytest.fixture(params=["local", "s3", "gs"])
def logs(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A log store: a local folder, or one on each object store."""
    if request.param == "local":
        return str(tmp_path / "logs")
    return f"{request.getfixturevalue(f'{request.param}_env')}/logs"


def _source(tmp_path: Path, name: str, run: str, uid: str, score: float) -> Path:
    """Two prompts × 2 rollouts of ``run`` and one unreadable line (quarantined to ``run``)."""
    rows = [
        {"run_id": run, "uid": f"{uid}{u}", "rollout_idx": i, "response": RESP,
         "judge_score": score}
        for u in range(2)
        for i in range(2)
    ]  # fmt: skip
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    return p


def _sources(tmp_path: Path, tag: str, score: float) -> list[Path]:
    return [_source(tmp_path, f"{tag}-{r}.jsonl", r, f"{tag}{r}-", score) for r in RUNS]


def _ingest(sources: list[Path], logs: str, **kw) -> None:
    ingest(IngestConfig(sources=sources, logs=Path(logs), progress=False, **kw))


def _tree(logs: str, *, temps: bool = True) -> dict[str, bytes]:
    """Every stored file's bytes by path (lock files left out: they hold no data; ``temps``
    False: a live write's temp files too, as taken while the ingest under test streams)."""
    url = objstore.url_of(logs)
    if url is not None:
        fs = objstore.fsspec_fs(url)
        root = objstore.key_of(url)
        return {k[len(root) :]: fs.cat_file(k) for k in fs.find(root)}
    root = Path(logs)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and p.relative_to(root).parts[0] != store.LOCK_DIR
        and (temps or not any(n.startswith(".tmp-") for n in p.relative_to(root).parts))
    }


def _data(tree: dict[str, bytes]) -> dict[str, bytes]:
    """A store's files but its runs' manifest checkpoints and logs."""
    return {
        k: v
        for k, v in tree.items()
        if f"/{store.LOG_DIR}/" not in k and not k.endswith(f"/{store.MANIFEST}")
    }


def test_a_refused_third_run_leaves_the_store_byte_identical(logs, tmp_path, monkeypatch):
    _ingest(_sources(tmp_path, "old", 0.0), logs)
    mine = _sources(tmp_path, "new", 1.0)
    real = store.stored_keys
    before: dict[str, bytes] = {}

    def keys_then_a_rival(where, run, checked):
        # while this ingest streams, another append commits the same rollouts of r3 (from
        # another file: the same file would be recognised as this ingest, stored already)
        yield from real(where, run, checked)
        if run == "r3" and not before:
            monkeypatch.setattr(store, "stored_keys", real)
            rival = tmp_path / "rival-r3.jsonl"
            rival.write_text("".join(reversed(mine[2].read_text().splitlines(keepends=True))))
            _ingest([rival], logs, append=True)
            before.update(_tree(logs, temps=False))

    monkeypatch.setattr(store, "stored_keys", keys_then_a_rival)
    args = ["ingest", *map(str, mine), "--logs", logs, "--append", "--no-progress"]
    res = CliRunner().invoke(app, args)
    said = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert before and _tree(logs) == before  # r1 and r2 were checked but not committed either
    assert f"run 'r3' (input: {mine[2]}) was refused" in said
    assert "another append committed 4 of this write's rollouts" in said
    assert "Nothing of this command was committed (runs r1, r2 were not committed)" in said
    assert "run the command again" in said
    # run again: r3's repeated rollouts are quarantined as stored, r1 and r2 land
    monkeypatch.setattr(store, "stored_keys", real)
    _ingest(mine, logs, append=True)
    totals = {r: store.run_manifest(logs, r)["rollouts_total"] for r in RUNS}
    assert totals == {"r1": 8, "r2": 8, "r3": 8}


def test_a_corrupt_third_input_leaves_the_store_byte_identical(logs, tmp_path):
    _ingest(_sources(tmp_path, "old", 0.0), logs)
    before = _tree(logs)
    mine = _sources(tmp_path, "new", 1.0)[:2]
    bad = tmp_path / "r3.parquet"
    bad.write_bytes(b"PAR1 cut off mid-upload")
    args = ["ingest", *map(str, mine), str(bad), "--logs", logs, "--no-progress"]
    res = CliRunner().invoke(app, [*args, "--input-format", "ddai"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"{bad}: Parquet magic bytes not found" in said
    assert f"nothing of this ingest was committed: fix or leave out {bad}" in said
    assert _tree(logs) == before  # r1 and r2 were read whole, and not committed


def _fail_the_commit_of_r3(logs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """r3's commit fails after r1 and r2 committed: a full disk on a local store, a manifest put
    that loses every race on object storage (another writer creates each log entry first)."""
    if objstore.is_url(logs):
        real_put = objstore.put_bytes

        def put(url, data, **kw):
            if f"run_id=r3/{store.LOG_DIR}/" in url:  # the commit: the log's next delta
                raise objstore.ConflictError(f"{url} was changed by another writer")
            return real_put(url, data, **kw)

        monkeypatch.setattr(objstore, "put_bytes", put)
        return
    real_commit = store.PartitionWriter._commit

    def commit(self, manifest, if_unchanged=None, journal=None):
        if self.run_id == "r3":
            raise OSError(28, "No space left on device")
        return real_commit(self, manifest, if_unchanged, journal)

    monkeypatch.setattr(store.PartitionWriter, "_commit", commit)


def test_a_late_failure_rolls_back_the_runs_committed_before_it(logs, tmp_path, monkeypatch):
    _ingest(_sources(tmp_path, "old", 0.0), logs)
    before = _tree(logs)
    olds = {r: store.run_manifest(logs, r) for r in RUNS}
    mine = _sources(tmp_path, "new", 1.0)
    with monkeypatch.context() as m:
        _fail_the_commit_of_r3(logs, m)
        # a replace: r1 and r2's old parts must come back
        res = CliRunner().invoke(app, ["ingest", *map(str, mine), "--logs", logs, "--no-progress"])
    said = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert f"run 'r3' (input: {mine[2]}) was refused" in said
    assert "runs r1, r2 were rolled back" in said
    # the old versions, their quarantine entries and manifests, byte for byte; nothing new left.
    # On object storage the manifest log is never rewritten (a writer may already have read
    # this command's entry): the old manifests are committed again as new log entries, so
    # there the folded manifests are the old ones, field for field.
    if objstore.is_url(logs):
        assert _data(_tree(logs)) == _data(before)
        assert {r: store.run_manifest(logs, r) for r in RUNS} == olds
    else:
        assert _tree(logs) == before
    for r in RUNS:
        assert store.read_rollouts(logs, [r])["judge_score"].to_pylist() == [0.0] * 4
        assert store.verify_partition(store.partition_dir(logs, r)) is None
    # without the fault the same ingest commits all three
    _ingest(mine, logs)
    for r in RUNS:
        assert store.read_rollouts(logs, [r])["judge_score"].to_pylist() == [1.0] * 4


def test_a_kill_midway_leaves_whole_runs_and_the_next_ingest_rolls_it_back(tmp_path):
    """kill -9 cannot roll back itself: r1 stays committed whole, r2 and r3 as they were; the
    next ingest (of another run here) rolls r1 back from the killed command's journal."""
    logs = str(tmp_path / "logs")
    _ingest(_sources(tmp_path, "old", 0.0), logs)
    before, manifests = _tree(logs), {r: store.run_manifest(logs, r) for r in RUNS}
    mine = _sources(tmp_path, "new", 1.0)
    code = "import sys; from ddai.cli.app import main; sys.argv = ['ddai', *sys.argv[1:]]; main()"
    args = ["ingest", *map(str, mine), "--logs", logs, "--no-progress"]
    env = {**os.environ, "DDAI_TEST_CRASH_AT": "partition-data:r2"}
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, timeout=300)
    assert res.returncode == -signal.SIGKILL
    assert [p.name for p in Path(logs).glob(".tmp-undo-*")]  # left by the killed command
    scores = {r: set(store.read_rollouts(logs, [r])["judge_score"].to_pylist()) for r in RUNS}
    assert scores == {"r1": {1.0}, "r2": {0.0}, "r3": {0.0}}
    _ingest([_source(tmp_path, "other.jsonl", "other", "o-", 0.5)], logs)
    scores = {r: set(store.read_rollouts(logs, [r])["judge_score"].to_pylist()) for r in RUNS}
    assert scores == {"r1": {0.0}, "r2": {0.0}, "r3": {0.0}}
    after = {k: v for k, v in _tree(logs).items() if "other" not in k}
    assert _data(after) == _data(before)  # r1's files as they were, the killed parts gone
    assert {r: store.run_manifest(logs, r) for r in RUNS} == manifests
    assert not list(Path(logs).glob(".tmp-*"))
    _ingest(mine, logs)  # the next write cleans up and commits
    assert not list(Path(logs).glob(".tmp-*"))
    for r in RUNS:
        assert store.read_rollouts(logs, [r])["judge_score"].to_pylist() == [1.0] * 4
        assert store.verify_partition(store.partition_dir(logs, r)) is None
