"""kill -9 at each commit point of ``ingest``, ``curate bucket``, ``curate focus`` and ``distill``,
then a rerun: the rerun produces the right output, nothing half-written ever looks finished, a
step's outputs are the old set or the new one (never a mix), and the crash's leftovers are
cleaned.

The kill comes from the commit-point hook (``DDAI_TEST_CRASH_AT``, ``ddai.pipelines.store.io``): the
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
from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import locks, manifest, quarantine, query, stage, workspace

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


def _set_points(outputs: list[str], *, staged: list[str] | None = None) -> list[tuple[str, bool]]:
    """Every kill point of one step's set commit, with whether the new set stands after it:
    while staging (each manifest), before the journal, then before each rename of the
    roll-forward (outputs first, then manifests)."""
    before = [f"manifest:{o}" for o in (outputs if staged is None else staged)]
    before.append(f"set-journal:{outputs[0]}")
    finals = [*outputs, *(f"{o}.manifest.json" for o in (outputs if staged is None else staged))]
    return [(p, False) for p in before] + [(f"set-rename:{f}", True) for f in finals]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".staged")) or
                  (p.name.startswith(".ddai-set-") and p.name.endswith(".json")))  # fmt: skip


@pytest.fixture(scope="module")
def ref03(world, tmp_path_factory):
    """The buckets of the killed invocations' parameters (``--mastered 0.3``), written whole."""
    out = tmp_path_factory.mktemp("ref03")
    _bucket(world["logs"], out, "--mastered", "0.3")
    return out


@pytest.mark.parametrize(("point", "new"), _set_points(BUCKETS))
def test_bucket_killed_anywhere_leaves_the_old_set_or_the_new_one(
    world, ref03, tmp_path, point, new
):
    """The issue's case: a 0.7 set committed, a ``--mastered 0.3`` run killed between its file
    writes. Before, b and its manifest were 0.3 while a and 0 stayed 0.7 (13 prompts in both B and
    A) and every check passed; now every reader sees one invocation's three buckets."""
    out = tmp_path / "out"
    _bucket(world["logs"], out)  # a committed default (0.7) set first
    killed_at(point, *_bucket_args(world["logs"], out, "--mastered", "0.3"))
    # a reader (lineage --check) finishes a set killed after its commit point, and passes it
    for name in BUCKETS:
        assert _lineage_check(out / name) == 0, name
    want = ref03 if new else world["ref"]
    got = {name: rows(out / name) for name in BUCKETS}
    assert got == {name: rows(want / name) for name in BUCKETS}
    ids = [{r["id"] for r in got[name]} for name in BUCKETS]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])
    step_ids = {manifest.read(out / name)["step_id"] for name in BUCKETS}
    assert len(step_ids) == 1 and all(manifest.verify(out / n) is None for n in BUCKETS)
    # curate focus consumes the set as it stands
    assert _focus(world["logs"], out, tmp_path / "r1.parquet")["round_1"] > 0
    # the next write of the set starts from there and leaves nothing behind
    res = _bucket(world["logs"], out)
    assert res["skipped_unchanged"] is (not new)  # the old set was intact: nothing to redo
    assert all(rows(out / n) == rows(world["ref"] / n) for n in BUCKETS)
    assert _leftovers(out) == []


def test_bucket_first_run_killed_leaves_nothing_that_looks_finished(world, tmp_path):
    out = tmp_path / "out"
    killed_at(f"set-journal:{BUCKETS[0]}", *_bucket_args(world["logs"], out, "--mastered", "0.5"))
    assert not any((out / n).exists() for n in BUCKETS)  # staged only: no output, no manifest
    assert _bucket(world["logs"], out)["skipped_unchanged"] is False
    assert all(rows(out / n) == rows(world["ref"] / n) for n in BUCKETS)
    assert _leftovers(out) == []


def test_a_set_assembled_from_two_invocations_is_refused(world, ref03, tmp_path):
    """b (with its manifest) from a 0.3 run beside a and 0 of a 0.7 run: each file matches its own
    manifest, so only the step ids tell; lineage --check exits 1 and curate focus refuses."""
    out = tmp_path / "mixed"
    _bucket(world["logs"], out)
    for name in (BUCKETS[0], f"{BUCKETS[0]}.manifest.json"):
        (out / name).write_bytes((ref03 / name).read_bytes())
    res = runner.invoke(app, ["lineage", str(out / BUCKETS[1]), "--check"])
    assert res.exit_code == 1
    assert "mixed set" in res.output and BUCKETS[0] in res.output and "Rerun" in res.output
    assert _lineage_check(out / BUCKETS[0]) == 1
    r = runner.invoke(app, _focus_args(world["logs"], out, tmp_path / "r1.parquet"))
    assert r.exit_code == 2, r.output
    assert "mixed set" in r.output and BUCKETS[0] in r.output and "curate.bucket" in r.output
    assert not (tmp_path / "r1.parquet").exists()
    # the fix the message names: rerun the step, and the set is whole again
    assert _bucket(world["logs"], out, "--force")["skipped_unchanged"] is False
    assert all(_lineage_check(out / n) == 0 for n in BUCKETS)


@pytest.mark.parametrize(("point", "new"), _set_points(["round1.parquet"]))
def test_focus_killed_then_rerun_is_right(world, tmp_path, point, new):
    out = tmp_path / "round1.parquet"
    _focus(world["logs"], world["ref"], out)
    killed_at(point, *_focus_args(world["logs"], world["ref"], out, "--hard-max", "0.05"))
    assert _lineage_check(out) == 0 and manifest.verify(out) is None
    assert (manifest.read(out)["params"]["hard_max"] == 0.05) is new
    res = _focus(world["logs"], world["ref"], out)
    assert res["skipped_unchanged"] is (not new)
    assert rows(out) == rows(world["ref"] / "round1.parquet")
    assert manifest.verify(out) is None and _lineage_check(out) == 0
    assert _leftovers(tmp_path) == []


def _distill_args(logs: Path, out: Path, *extra: str) -> list[str]:
    return ["distill", "--logs", str(logs), "--run", "focused_r1", "--out", str(out),
            "--rewrite", "none", "--no-progress", *extra]  # fmt: skip


_SFT = ["sft.parquet", "sft.parquet.report.jsonl"]


@pytest.mark.parametrize(("point", "new"), _set_points(_SFT, staged=_SFT[:1]))
def test_distill_killed_then_rerun_is_right(world, tmp_path, point, new):
    refs = {}
    for k, extra in (("old", ()), ("new", ("--top-k", "1"))):
        refs[k] = tmp_path / k / "sft.parquet"
        cli(*_distill_args(world["logs"], refs[k], *extra))
    out = tmp_path / "out" / "sft.parquet"
    cli(*_distill_args(world["logs"], out))
    killed_at(point, *_distill_args(world["logs"], out, "--top-k", "1"))
    assert _lineage_check(out) == 0
    want = refs["new" if new else "old"]
    assert rows(out) == rows(want)
    report = out.parent / _SFT[1]
    assert report.read_bytes() == (want.parent / _SFT[1]).read_bytes()  # the report goes along
    assert manifest.verify(out) is None and manifest.set_mismatch(out) is None
    res = cli(*_distill_args(world["logs"], out))
    assert ("skipped" in res) is (not new)
    assert rows(out) == rows(refs["old"])
    assert manifest.verify(out) is None
    assert _leftovers(out.parent) == []


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


# ------------------------------------------------------------------ object storage (moto's S3)


def _s3_bucket_args(s3: str, *extra: str) -> list[str]:
    return [
        "curate", "bucket", "--dataset", f"{s3}/dataset.parquet", "--scores", f"{s3}/scores.csv",
        "--score-col", "phase1_ndcg", "--out-dir", f"{s3}/b", *extra,
    ]  # fmt: skip


def _s3_ids(s3: str) -> dict[str, set[str]]:
    from ddai.pipelines.store import objstore

    out = {}
    for name in BUCKETS:
        url = f"{s3}/b/{name}"
        table = pq.read_table(objstore.key_of(url), filesystem=objstore.arrow_fs(url))
        out[name] = set(table["id"].to_pylist())
    return out


@pytest.mark.parametrize(
    ("point", "new"),
    [
        (f"set-stage:{BUCKETS[1]}", False),
        (f"set-journal:{BUCKETS[0]}", False),
        (f"set-rename:{BUCKETS[1]}", True),
        (f"set-rename:{BUCKETS[2]}.manifest.json", True),
    ],
)
def test_bucket_on_s3_killed_leaves_the_old_set_or_the_new_one(s3_env, point, new):
    from ddai.pipelines.store import objstore

    ids = pq.read_table(FIXTURES / "dataset.parquet")["id"].to_pylist()
    scores = {i: [0.9, 0.5, 0.05][n % 3] for n, i in enumerate(ids)}
    csv_text = "id,phase1_ndcg\n" + "".join(f"{i},{s}\n" for i, s in scores.items())
    objstore.put_bytes(f"{s3_env}/scores.csv", csv_text.encode())
    objstore.put_file(FIXTURES / "dataset.parquet", f"{s3_env}/dataset.parquet")
    cli(*_s3_bucket_args(s3_env))  # 0.5 lands in A
    old = _s3_ids(s3_env)
    killed_at(point, *_s3_bucket_args(s3_env, "--mastered", "0.4"))  # 0.5 moves to B
    for name in BUCKETS:
        assert _lineage_check(f"{s3_env}/b/{name}") == 0, name
    got = _s3_ids(s3_env)
    by_score = {v: {i for i, s in scores.items() if s == v} for v in (0.9, 0.5, 0.05)}
    want_b = by_score[0.9] | by_score[0.5] if new else by_score[0.9]
    assert got[BUCKETS[0]] == want_b and got[BUCKETS[2]] == by_score[0.05]
    assert (got == old) is (not new)
    # the next write (a default run) starts from there and leaves nothing behind
    assert cli(*_s3_bucket_args(s3_env))["skipped_unchanged"] is (not new)
    assert _s3_ids(s3_env) == old
    assert not [n for n in objstore.listdir(f"{s3_env}/b") if n.startswith(".")]
    # a hand-mixed set on S3: b and its manifest of the other invocation
    cli(*_s3_bucket_args(s3_env, "--mastered", "0.4", "--out-dir", f"{s3_env}/other"))
    # that write removed the killed command's local staging (under the workspace, not /tmp)
    staged = workspace.home() / stage.STAGE_DIR
    assert not [p.name for p in staged.iterdir() if not p.name.startswith(locks.CLAIMING)]
    for n in (BUCKETS[0], f"{BUCKETS[0]}.manifest.json"):
        objstore.copy(f"{s3_env}/other/{n}", f"{s3_env}/b/{n}")
    res = runner.invoke(app, ["lineage", f"{s3_env}/b/{BUCKETS[1]}", "--check"])
    assert res.exit_code == 1 and "mixed set" in res.output, res.output
