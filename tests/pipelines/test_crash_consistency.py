"""kill -9 at each commit point of ``ingest``, ``curate bucket``, ``curate focus`` and ``distill``,
then a rerun: the rerun produces the right output, nothing half-written ever looks finished, and
the crash's leftovers are cleaned.

The kill comes from the commit-point hook (``DDAI_TEST_CRASH_AT``, ``ddai.pipelines.io``): the
command runs in a subprocess that SIGKILLs itself on reaching the named point, so no cleanup code
runs, exactly as with an outside ``kill -9``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import manifest, quarantine, query, store
from ddai.pipelines.ingest import IngestConfig, ingest

runner = CliRunner()
BUCKETS = [f"curriculum_bucket_{b}.parquet" for b in ("b", "a", "0")]


def killed_at(point: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``ddai ARGS`` in a subprocess that is SIGKILLed at commit point ``point``."""
    env = {**os.environ, "DDAI_TEST_CRASH_AT": point}
    code = "import sys; from ddai.cli.app import main; sys.argv = ['ddai', *sys.argv[1:]]; main()"
    res = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == -signal.SIGKILL, (point, res.returncode, res.stderr[-2000:])
    return res


def cli(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The phase-1 run ingested, and the default bucket/focus outputs of it (the references)."""
    root = tmp_path_factory.mktemp("crash")
    logs = root / "logs"
    runs = [FIXTURES / "logs" / f"{r}.jsonl" for r in ("phase1", "focused_r1")]
    ingest(IngestConfig(runs, logs, progress=False))
    ref = root / "ref"
    _bucket(logs, ref)
    _focus(logs, ref, ref / "round1.parquet")
    return {"logs": logs, "ref": ref}


def _bucket(logs: Path, out: Path, *extra: str) -> dict:
    return cli(
        "curate", "bucket", "--dataset", str(FIXTURES / "dataset.parquet"), "--logs", str(logs),
        "--run", "phase1", "--out-dir", str(out), *extra,
    )  # fmt: skip


def _bucket_args(logs: Path, out: Path, *extra: str) -> list[str]:
    return [
        "curate", "bucket", "--dataset", str(FIXTURES / "dataset.parquet"), "--logs", str(logs),
        "--run", "phase1", "--out-dir", str(out), *extra,
    ]  # fmt: skip


def _focus_args(logs: Path, buckets: Path, out: Path, *extra: str) -> list[str]:
    return [
        "curate", "focus", "--bucket-a", str(buckets / BUCKETS[1]), "--bucket-0",
        str(buckets / BUCKETS[2]), "--logs", str(logs), "--run", "phase1", "--out", str(out),
        *extra,
    ]  # fmt: skip


def _focus(logs: Path, buckets: Path, out: Path, *extra: str) -> dict:
    return cli(*_focus_args(logs, buckets, out, *extra))


def _lineage_check(path: Path) -> int:
    return runner.invoke(app, ["lineage", str(path), "--check", "--json"]).exit_code


@pytest.mark.parametrize(
    "point",
    [f"manifest:{BUCKETS[0]}", f"rename:{BUCKETS[1]}", f"manifest:{BUCKETS[2]}"],
)
def test_bucket_killed_then_rerun_with_defaults_is_right(world, tmp_path, point):
    out = tmp_path / "out"
    _bucket(world["logs"], out)  # a committed default run first: its manifests exist
    killed_at(point, *_bucket_args(world["logs"], out, "--mastered", "0.5"))
    if point == f"manifest:{BUCKETS[0]}":
        # the case: bucket B holds the 0.5 buckets, its manifest still the defaults
        assert rows(out / BUCKETS[0]) != rows(world["ref"] / BUCKETS[0])
        assert manifest.verify(out / BUCKETS[0]) is not None
        assert _lineage_check(out / BUCKETS[0]) == 1  # --check names the uncommitted output
    res = _bucket(world["logs"], out)
    assert res["skipped_unchanged"] is False
    for name in BUCKETS:
        assert rows(out / name) == rows(world["ref"] / name)
        assert manifest.verify(out / name) is None
        assert _lineage_check(out / name) == 0
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # leftovers cleaned
    assert _bucket(world["logs"], out)["skipped_unchanged"] is True


def test_bucket_first_run_killed_leaves_nothing_that_looks_finished(world, tmp_path):
    out = tmp_path / "out"
    killed_at(f"manifest:{BUCKETS[1]}", *_bucket_args(world["logs"], out, "--mastered", "0.5"))
    assert (out / BUCKETS[1]).exists() and manifest.read(out / BUCKETS[1]) is None
    assert _bucket(world["logs"], out)["skipped_unchanged"] is False
    assert all(rows(out / n) == rows(world["ref"] / n) for n in BUCKETS)


@pytest.mark.parametrize("point", ["rename:round1.parquet", "manifest:round1.parquet"])
def test_focus_killed_then_rerun_is_right(world, tmp_path, point):
    out = tmp_path / "round1.parquet"
    _focus(world["logs"], world["ref"], out)
    killed_at(point, *_focus_args(world["logs"], world["ref"], out, "--hard-max", "0.05"))
    res = _focus(world["logs"], world["ref"], out)
    assert res["skipped_unchanged"] is (point.startswith("rename:"))  # nothing new was written
    assert rows(out) == rows(world["ref"] / "round1.parquet")
    assert manifest.verify(out) is None and _lineage_check(out) == 0


def _distill_args(logs: Path, out: Path, *extra: str) -> list[str]:
    return ["distill", "--logs", str(logs), "--run", "focused_r1", "--out", str(out),
            "--rewrite", "none", "--no-progress", *extra]  # fmt: skip


@pytest.mark.parametrize("point", ["manifest:sft.parquet", "rename:sft.parquet.manifest.json"])
def test_distill_killed_then_rerun_is_right(world, tmp_path, point):
    ref = tmp_path / "ref" / "sft.parquet"
    cli(*_distill_args(world["logs"], ref))
    out = tmp_path / "out" / "sft.parquet"
    cli(*_distill_args(world["logs"], out))
    killed_at(point, *_distill_args(world["logs"], out, "--top-k", "1"))
    assert manifest.verify(out) is not None  # the top-1 file is in place, not committed
    res = cli(*_distill_args(world["logs"], out))
    assert "skipped" not in res
    assert rows(out) == rows(ref)
    assert manifest.verify(out) is None
    assert not [p.name for p in out.parent.iterdir() if p.name.endswith(".tmp")]


def _write_rollouts(path: Path, n: int, bad: int = 0) -> Path:
    lines = [json.dumps({"run_id": "r", "uid": f"u{i // 4}", "rollout_idx": i % 4, "ndcg": 0.5})
             for i in range(n)]  # fmt: skip
    lines += ['{"run_id": "r", "uid": ' for _ in range(bad)]
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def _count(logs: Path, run: str = "r") -> int:
    con = query.connect(logs, [run])
    return query.run_sql(con, "SELECT count(*) AS n FROM rollouts")["n"][0].as_py()


@pytest.mark.parametrize(
    ("point", "committed"),
    [
        ("partition-data:r", 8),
        ("quarantine:r", 8),  # its quarantine part written, not listed by any commit
        # after the commit point (the manifest log's delta), before or while the checkpoint is
        # written: the new version stands, whole
        ("manifest-checkpoint:r", 12),
        ("rename:_manifest.json", 12),
    ],
)
def test_reingest_killed_keeps_the_old_version_and_rerun_cleans_up(tmp_path, point, committed):
    logs = tmp_path / "logs"
    old = _write_rollouts(tmp_path / "old.jsonl", 8, bad=1)
    new = _write_rollouts(tmp_path / "new.jsonl", 12, bad=2)
    ingest(IngestConfig([old], logs, progress=False))
    first_id = store.run_manifest(logs, "r")["ingest"]
    killed_at(point, "ingest", str(new), "--logs", str(logs), "--no-progress")
    # readers see one version, whole: data and manifest agree
    man = store.run_manifest(logs, "r")
    assert _count(logs) == committed and man["rollouts_total"] == committed
    assert store.verify_partition(store.partition_dir(logs, "r")) is None
    ingest(IngestConfig([new], logs, progress=False))
    man = store.run_manifest(logs, "r")
    assert _count(logs) == 12 and man["rollouts_total"] == 12
    part = store.partition_dir(logs, "r")
    assert sorted(p.name for p in part.iterdir()) == sorted(
        [store.MANIFEST, store.LOG_DIR, *(f["name"] for f in man["files"])]
    )
    assert not [p for p in logs.iterdir() if p.name.startswith((".tmp-", ".old-"))]
    assert not [p for p in (logs / "_quarantine").rglob(".*")]
    # quarantine: the first ingest's entry survives, the rerun's are there once; the killed
    # ingest's only when its commit stood (the manifest log's delta lists them with its rows)
    q = [json.loads(x) for x in quarantine.read(logs, "r").splitlines()]
    by_ingest: dict[str, int] = {}
    for e in q:
        by_ingest[e["ingest"]] = by_ingest.get(e["ingest"], 0) + 1
    assert by_ingest.pop(first_id) == 1
    assert by_ingest.pop(man["ingest"]) == 2
    assert sum(by_ingest.values()) == (2 if committed == 12 else 0)
    listed = {p["name"] for p in quarantine.listed(logs, "r")}
    assert {p.name for p in quarantine.run_dir(logs, "r").glob("part-*")} == listed


def test_first_ingest_killed_leaves_no_run(tmp_path):
    logs = tmp_path / "logs"
    src = _write_rollouts(tmp_path / "a.jsonl", 8)
    killed_at("partition-data:r", "ingest", str(src), "--logs", str(logs), "--no-progress")
    assert store.partition_dir(logs, "r").is_dir()  # parts moved in, manifest never written
    assert store.list_runs(logs) == []
    with pytest.raises(FileNotFoundError, match=r"without _manifest\.json"):
        store.read_rollouts(logs, ["r"])
    ingest(IngestConfig([src], logs, progress=False))
    assert _count(logs) == 8
    part = store.partition_dir(logs, "r")
    assert len(list(part.glob("*.parquet"))) == 1  # the crashed write's part was removed
