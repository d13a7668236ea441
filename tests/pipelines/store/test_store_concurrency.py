"""Concurrent writers and readers of one run: writers serialize on the run's lock (appends never
lose manifest history), readers see one whole version while the run is replaced, and the
quarantine accumulates across ingests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import quarantine, query


def _source(path: Path, n: int, *, uid: str = "u", bad: int = 0) -> Path:
    lines = [json.dumps({"run_id": "r", "uid": f"{uid}{i}", "rollout_idx": 0}) for i in range(n)]
    lines += ['{"run_id": "r", "uid": ' for _ in range(bad)]
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def test_four_concurrent_appends_keep_exact_counts(tmp_path):
    """4 appends × 10 trials: every trial's manifest counts every rollout and keeps every append
    in its history."""
    sizes = [10, 20, 30, 50]
    for trial in range(10):
        logs = tmp_path / f"t{trial}"
        srcs = [
            _source(tmp_path / f"s{trial}_{k}.jsonl", n, uid=f"w{k}_") for k, n in enumerate(sizes)
        ]
        cfgs = [IngestConfig([s], logs, append=True, progress=False) for s in srcs]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(ingest, cfgs))
        man = store.run_manifest(logs, "r")
        assert man["rollouts_total"] == sum(sizes) == 110
        appended = sorted([h["rollouts_out"] for h in man.get("history", [])] + [
            man["rollouts_out"]])  # fmt: skip
        assert appended == sizes
        assert len(man["files"]) == 4 and sum(f["rows"] for f in man["files"]) == 110
        assert store.read_rollouts(logs, ["r"]).num_rows == 110
        assert man["capabilities"]["rollouts"] == 110


def test_appends_from_separate_processes(tmp_path):
    logs = tmp_path / "logs"
    code = (
        "import sys; from pathlib import Path; from ddai.pipelines.ingest import IngestConfig, "
        "ingest; ingest(IngestConfig([Path(sys.argv[1])], Path(sys.argv[2]), append=True, "
        "progress=False))"
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(_source(tmp_path / f"p{k}.jsonl", 25, uid=f"p{k}_")),
                str(logs),
            ]
        )
        for k in range(4)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    man = store.run_manifest(logs, "r")
    assert man["rollouts_total"] == 100 and len(man["history"]) == 3


def test_four_concurrent_replace_ingests_leave_one_whole_version(tmp_path):
    """The issue's ENOENT: 4 processes replace run r at once, 3 trials; every ingest succeeds
    and the run is exactly the last committer's version, its manifest listing its files."""
    code = (
        "import sys; from pathlib import Path; from ddai.pipelines.ingest import IngestConfig, "
        "ingest; ingest(IngestConfig([Path(sys.argv[1])], Path(sys.argv[2]), progress=False))"
    )
    sizes = {f"p{k}_": 10 * (k + 1) for k in range(4)}
    for trial in range(3):
        logs = tmp_path / f"t{trial}"
        srcs = [_source(tmp_path / f"r{trial}{p}.jsonl", n, uid=p) for p, n in sizes.items()]
        procs = [subprocess.Popen([sys.executable, "-c", code, str(s), str(logs)]) for s in srcs]
        assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
        man = store.run_manifest(logs, "r")
        uids = store.read_rollouts(logs, ["r"], columns=["uid"]).column("uid").to_pylist()
        (prefix,) = {u.rsplit("_", 1)[0] + "_" for u in uids}  # one writer's rows, no mix
        assert len(uids) == man["rollouts_total"] == sizes[prefix] and "history" not in man
        assert store.verify_partition(store.partition_dir(logs, "r")) is None
        part = store.partition_dir(logs, "r")
        assert sorted(p.name for p in part.iterdir()) == sorted(
            [store.MANIFEST, store.LOG_DIR, *(f["name"] for f in man["files"])]
        )


def test_a_waiting_writer_says_so(tmp_path):
    said: list[str] = []
    done = threading.Event()

    def second() -> None:
        with store.run_lock(tmp_path, "r", on_wait=said.append):
            done.set()

    with store.run_lock(tmp_path, "r"):
        t = threading.Thread(target=second)
        t.start()
        for _ in range(200):
            if said:
                break
            time.sleep(0.01)
        assert not done.is_set()  # blocked while the first writer holds the lock
    t.join(timeout=10)
    assert done.is_set()
    assert said and "write lock of run 'r'" in said[0] and f"pid {os.getpid()}" in said[0]


@pytest.mark.parametrize("queries", [25, pytest.param(200, marks=pytest.mark.slow, id="200-slow")])
def test_queries_during_alternating_reingests(tmp_path, queries):
    """A writer process replaces run r over and over with 40 or 70 rollouts; the queries meanwhile
    all succeed and each sees one whole version (never a mix, never no files)."""
    logs = tmp_path / "logs"
    a, b = _source(tmp_path / "a.jsonl", 40), _source(tmp_path / "b.jsonl", 70, uid="v")
    ingest(IngestConfig([a], logs, progress=False))
    stop = tmp_path / "stop"
    code = (
        "import sys; from pathlib import Path; from ddai.pipelines.ingest import IngestConfig, "
        "ingest\nsrcs = [Path(sys.argv[1]), Path(sys.argv[2])]; i = 0\n"
        "while not Path(sys.argv[4]).exists():\n"
        "    ingest(IngestConfig([srcs[i % 2]], Path(sys.argv[3]), progress=False)); i += 1\n"
        "print(i)"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", code, str(b), str(a), str(logs), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    seen: dict[tuple[int, int], int] = {}
    failures: list[str] = []
    try:
        deadline = time.time() + 120
        while store.run_manifest(logs, "r")["rollouts_total"] != 70:  # the writer has started
            assert time.time() < deadline and writer.poll() is None
            time.sleep(0.05)
        for _ in range(queries):
            try:
                con = query.connect(logs, ["r"])
                n, uids = (
                    query.run_sql(
                        con, "SELECT count(*) AS n, count(DISTINCT uid) AS u FROM rollouts"
                    )
                    .to_pylist()[0]
                    .values()
                )
                con.close()
                seen[(n, uids)] = seen.get((n, uids), 0) + 1
            except Exception as e:
                failures.append(repr(e))
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=300)
    assert writer.returncode == 0
    assert failures == []
    assert set(seen) <= {(40, 40), (70, 70)}  # one whole version per query
    assert sum(seen.values()) == queries and int(out) >= 2  # the writer really replaced the run


def test_quarantine_accumulates_across_ingests_tagged_by_ingest(tmp_path):
    logs = tmp_path / "logs"
    src = _source(tmp_path / "a.jsonl", 3, bad=2)
    ingest(IngestConfig([src], logs, progress=False))
    first = store.run_manifest(logs, "r")["ingest"]
    ingest(IngestConfig([_source(tmp_path / "b.jsonl", 3)], logs, progress=False))  # no bad rows
    ingest(IngestConfig([src], logs, progress=False))
    last = store.run_manifest(logs, "r")["ingest"]
    q = [json.loads(x) for x in quarantine.read(logs, "r").decode().splitlines()]
    assert [e["ingest"] for e in q] == [first, first, last, last] and first != last
    assert [e["line"] for e in q] == [4, 5, 4, 5]


def test_lone_surrogate_in_quarantined_raw_text_is_kept(tmp_path):
    logs = tmp_path / "logs"
    src = tmp_path / "s.jsonl"
    src.write_text('{"run_id": "r", "uid": "u", "rollout_idx": 0}\n{"run_id": "r", "uid": "\\ud83d"'
                   ', "rollout_idx": "x"}\n', encoding="utf-8")  # fmt: skip
    res = ingest(IngestConfig([src], logs, progress=False))
    assert res.rollouts_out == 1 and sum(res.quarantined.values()) == 1
    (e,) = [json.loads(x) for x in quarantine.read(logs, "r").decode().splitlines()]
    assert e["line"] == 2 and "ud83d" in e["raw"]
