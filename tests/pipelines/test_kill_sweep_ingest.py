"""kill -9 before and after every rename, link, replace, unlink and put of an ingest: each run
old or new, whole; no quarantine entry of an ingest that did not land; the next write (the same
command again) lands it once, recognises what landed, and leaves no leftover. On disk and on
moto's S3 server.

The kill is a SIGKILL the forked ingest sends itself at the N-th operation
(``support.kill_sweep``): no cleanup code runs. Two runs per ingest (r1, r2), each with bad lines,
appended to (or replacing) a committed version of both.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from support.kill_sweep import count_ops, killed_at_op
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import manifest_log, objstore, quarantine

RUNS = ("r1", "r2")
OLD, NEW = 4, 6  # rollouts per run, old version and this ingest's
BAD_OLD, BAD_NEW = 1, 2  # bad lines per run


def _source(path: Path, run: str, n: int, bad: int, tag: str) -> Path:
    rows = [{"run_id": run, "uid": f"{tag}{i // 2}", "rollout_idx": i % 2} for i in range(n)]
    lines = [json.dumps(r) for r in rows] + ['{"run_id": "' + run + '", "uid": '] * bad
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def _ingest_ids(logs: str | Path, run: str) -> set[str]:
    """The ingests a commit of ``run`` records (its manifest, history, quarantine log)."""
    man = store.run_manifest(logs, run) or {}
    ids = {man.get("ingest")} | {h.get("ingest") for h in man.get("history") or []}
    qlog = manifest_log.read_state(quarantine.run_dir(logs, run)).manifest or {}
    ids |= {p.get("ingest") for p in (qlog.get(quarantine.KEY) or {}).get("parts") or []}
    return {i for i in ids if i}


def _entries(logs: str | Path, run: str) -> Counter:
    """Committed quarantine entries of ``run`` by the ingest that wrote them."""
    return Counter(json.loads(x)["ingest"] for x in quarantine.read(logs, run).splitlines())


def _rows(logs: str | Path, run: str) -> int:
    return store.read_rollouts(logs, [run], columns=["uid"]).num_rows


def _names(where: str | Path) -> list[str]:
    """Every file under ``where`` (relative), locally or on object storage."""
    url = objstore.url_of(where)
    if url is None:
        root = Path(where)
        return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    fs = objstore.fsspec_fs(url)
    key = objstore.key_of(url)
    return [k[len(key) + 1 :] for k in fs.find(key)]


def _no_leftovers(logs: str | Path, home: Path) -> None:
    """Only committed files: no temp, claim or spool, no part no commit lists, no stage."""
    listed = set()
    for run in RUNS:
        man = store.run_manifest(logs, run) or {}
        listed |= {f"run_id={run}/{f['name']}" for f in man.get("files", [])}
        listed |= {f"_quarantine/{run}/{p['name']}" for p in quarantine.listed(logs, run)}
    extra = []
    for name in _names(logs):
        parts = name.split("/")
        if any(p.startswith(".") for p in parts):
            extra.append(name)  # a temp file, a claim, a spool, a journal
        elif parts[0] in (store.LOCK_DIR, "_stats"):
            continue
        elif store.LOG_DIR in parts[:-1] or parts[-1] == store.MANIFEST:
            continue  # a commit (a manifest log's delta or checkpoint)
        elif name not in listed:
            extra.append(name)  # a part no commit lists
    assert extra == []
    stage = home / store.STAGE_DIR
    assert not stage.exists() or list(stage.iterdir()) == []


def _sweep(
    logs: str,
    tmp_path: Path,
    *,
    append: bool,
    stride: int = 1,
    only: tuple[str, ...] | None = None,
    points: tuple[str, ...] = ("before", "after"),
) -> int:
    """Commit an old version of r1 and r2, then for every ``stride``-th operation (``only``: of
    these names) of an ingest of new sources: a fresh store, the ingest killed before / after
    that operation (``points``), the checks, the same command again, the checks. Returns the
    kill points tried."""
    home = Path(os.environ["DDAI_HOME"])
    olds = [_source(tmp_path / f"old-{r}.jsonl", r, OLD, BAD_OLD, "o") for r in RUNS]
    news = [_source(tmp_path / f"new-{r}.jsonl", r, NEW, BAD_NEW, "n") for r in RUNS]
    want = OLD + NEW if append else NEW

    def fresh(i: int) -> str:
        where = f"{logs}/{i}" if objstore.is_url(logs) else str(Path(logs) / str(i))
        ingest(IngestConfig(olds, Path(where), progress=False))
        return where

    def new_ingest(where: str):
        return lambda: ingest(IngestConfig(news, Path(where), append=append, progress=False))

    n_ops = count_ops(new_ingest(fresh(0)), only)
    assert n_ops >= 6
    tried = 0
    sweep = [(op, when) for op in range(1, n_ops + 1, stride) for when in points]
    if points == ("before",):
        sweep.append((n_ops, "after"))  # after the last one too
    for op, when in sweep:
        tried += 1
        where = fresh(tried)
        first = {r: store.run_manifest(where, r)["ingest"] for r in RUNS}
        killed_at_op(new_ingest(where), op, when, only)
        for run in RUNS:  # each run whole: the old version or the new one
            rows = _rows(where, run)
            assert rows in (OLD, want), (op, when, run, rows)
            assert store.verify_partition(store.partition_dir(where, run)) is None
            ids = _ingest_ids(where, run) | {first[run]}  # (a replace drops the history)
            got = _entries(where, run)
            # no entry of an ingest that did not land; the one that landed: its lines once
            assert set(got) <= ids, (op, when, run, got, ids)
            expect = {first[run]: BAD_OLD}
            if rows == want:  # landed: its lines once
                expect[store.run_manifest(where, run)["ingest"]] = BAD_NEW
            assert got == Counter(expect), (op, when, run, got, expect)
        before = {r: _entries(where, r) for r in RUNS}
        # the same command again: what landed is recognised, the rest lands, once
        args = ["ingest", *map(str, news), "--logs", where, "--no-progress", "--json"]
        res = CliRunner().invoke(app, [*args, *(["--append"] if append else [])])
        assert res.exit_code == 0, (op, when, res.output)
        stored = json.loads(res.stdout).get("already_stored", {})
        for run in RUNS:
            assert _rows(where, run) == want
            assert store.verify_partition(store.partition_dir(where, run)) is None
            got = _entries(where, run)
            # (a replace drops the history: the entries checked above count too)
            assert set(got) <= _ingest_ids(where, run) | set(before[run]), (op, when, run, got)
            added = got - before[run]
            if run in stored:  # an append whose commit stood: recognised, nothing added
                assert append and BAD_NEW in before[run].values() and added == Counter()
            else:  # landed now (a killed multi-run ingest's runs were rolled back first)
                assert added == Counter({store.run_manifest(where, run)["ingest"]: BAD_NEW})
            if append:  # the old lines and the new ones, once
                assert sorted(got.values()) == [BAD_OLD, BAD_NEW], (op, when, run, got)
        _no_leftovers(where, home)
    return tried


MODES = pytest.mark.parametrize("append", [True, False], ids=["append", "replace"])


@MODES
def test_a_local_ingest_killed_at_sampled_operations(tmp_path, append):
    """Every 4th operation (the full sweeps below, ~90 kills per mode, run with `make sweep`)."""
    assert _sweep(str(tmp_path / "logs"), tmp_path, append=append, stride=4) >= 20


PUTS = ("put_bytes", "put_file")


def test_an_s3_append_killed_before_every_put(s3_env, tmp_path, monkeypatch):
    """Before each put (after put k the bucket is as before put k + 1: the steps between write
    the local stage only), and after the last one."""
    monkeypatch.setenv(store.GRACE_ENV, "0")  # unlisted objects go at the next write
    assert _sweep(f"{s3_env}/logs", tmp_path, append=True, only=PUTS, points=("before",)) >= 7


@pytest.mark.sweep
@MODES
def test_a_local_ingest_killed_at_every_operation(tmp_path, append):
    assert _sweep(str(tmp_path / "logs"), tmp_path, append=append) >= 80


@pytest.mark.sweep
@MODES
def test_an_s3_ingest_killed_at_every_operation(s3_env, tmp_path, monkeypatch, append):
    monkeypatch.setenv(store.GRACE_ENV, "0")
    assert _sweep(f"{s3_env}/logs", tmp_path, append=append) >= 40
