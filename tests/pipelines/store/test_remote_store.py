"""A log store on object storage (S3 on moto, GCS on the fake server): staged ingest, conditional
commits, reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fetch_rows import fetch_rows

from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import objstore, quarantine, query, side_log

RESP = "<think>t</think>\n<search>q</search><think>d</think><search_complete>true</search_complete>"


def _source(tmp_path: Path, name: str, n_uids: int, *, bad: bool = True, uid: str = "u") -> Path:
    rows = [
        {"uid": f"{uid}{u}", "rollout_idx": i, "response": RESP, "judge_score": float(i < u)}
        for u in range(n_uids)
        for i in range(4)
    ]
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + ("{broken\n" if bad else ""))
    return p


def _ingest(src, logs, run="r1", **kw):
    return ingest(IngestConfig(sources=[src], logs=logs, run_id=run, progress=False, **kw))


def _count(logs, run="r1"):
    con = query.connect(logs, [run])
    try:
        return con.execute("SELECT count(*), sum(judge_score) FROM rollouts").fetchone()
    finally:
        con.close()


def test_ingest_query_and_verify_on_object_storage(store_env, tmp_path):
    logs = f"{store_env}/logs"
    res = _ingest(_source(tmp_path, "a.jsonl", 3), Path(logs))
    assert res.runs["r1"].rollouts_out == 12
    assert store.list_runs(logs) == ["r1"]
    man = store.run_manifest(logs, "r1")
    assert man["rollouts_out"] == 12 and man["rows_in"] == 13
    assert store.verify_partition(store.partition_dir(logs, "r1")) is None  # hashes match
    # the quarantine went to the store too, with the bad line
    q = quarantine.read(logs, "r1").decode().splitlines()
    assert len(q) == 1 and json.loads(q[0])["raw"].strip() == "{broken"
    # judge 1 for rollouts i < u: u0 none, u1 one, u2 two
    assert _count(logs) == (12, 3.0)


@pytest.mark.parametrize("scan", ["arrow", "fsspec"])
def test_both_scans_read_what_a_local_store_reads(store_env, tmp_path, monkeypatch, scan):
    src = _source(tmp_path, "a.jsonl", 5, bad=False)
    _ingest(src, Path(f"{store_env}/logs"))
    _ingest(src, tmp_path / "local")
    monkeypatch.setenv(query.SCAN_ENV, scan)
    sql = "SELECT uid, count(*), sum(judge_score) FROM rollouts GROUP BY 1 ORDER BY 1"
    remote = query.connect(f"{store_env}/logs").execute(sql).fetchall()
    local = query.connect(tmp_path / "local").execute(sql).fetchall()
    assert remote == local and len(remote) == 5


def test_append_keeps_both_and_quarantine_accumulates(store_env, tmp_path):
    logs = Path(f"{store_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    _ingest(_source(tmp_path, "b.jsonl", 2, uid="v"), logs, append=True)
    man = store.run_manifest(logs, "r1")
    assert len(man["files"]) == 2 and man["rollouts_total"] == 12 + 8
    assert len(man["history"]) == 1 and man["history"][0]["rollouts_out"] == 12
    assert _count(logs) == (20, 3.0 + 1.0)
    q = quarantine.read(logs, "r1").decode().splitlines()
    assert [json.loads(x)["source"].rsplit("/", 1)[-1] for x in q] == ["a.jsonl", "b.jsonl"]
    # each ingest put its own part: nothing already there was put again
    parts = objstore.listdir(f"{store_env}/logs/_quarantine/r1")
    assert len(parts) == 2 and not objstore.exists(f"{store_env}/logs/_quarantine/r1.jsonl")


def test_replace_keeps_old_parts_through_the_grace_period(store_env, tmp_path, monkeypatch):
    logs = Path(f"{store_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    first = store.run_manifest(logs, "r1")["files"][0]["name"]
    _ingest(_source(tmp_path, "b.jsonl", 2), logs)
    names = objstore.listdir(f"{store_env}/logs/run_id=r1")
    assert first in names  # a reader that listed it a moment ago still finds it
    assert _count(logs) == (8, 1.0)  # but only the new version is read
    monkeypatch.setenv(store.GRACE_ENV, "0")
    man = store.run_manifest(logs, "r1")
    assert store.collect_remote_garbage(f"{store_env}/logs/run_id=r1", man) == [first]
    assert objstore.listdir(f"{store_env}/logs/run_id=r1") == sorted(
        [store.MANIFEST, store.LOG_DIR, man["files"][0]["name"]]
    )


def test_a_concurrent_append_between_read_and_commit_is_merged_not_lost(
    store_env, tmp_path, monkeypatch
):
    logs = Path(f"{store_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    real_put = objstore.put_bytes
    raced = []

    def put_after_a_rival(url, data, **kw):
        if f"/{store.LOG_DIR}/" in url and not raced:  # the commit: the log's next delta
            raced.append(url)
            # another machine's append commits between our read of the manifest and our put
            _ingest(_source(tmp_path, "rival.jsonl", 1, bad=False, uid="w"), logs, append=True)
        return real_put(url, data, **kw)

    monkeypatch.setattr(objstore, "put_bytes", put_after_a_rival)
    _ingest(_source(tmp_path, "b.jsonl", 2, bad=False, uid="v"), logs, append=True)
    man = store.run_manifest(logs, "r1")
    assert raced and len(man["files"]) == 3
    assert man["rollouts_total"] == 12 + 4 + 8
    assert _count(logs) == (24, 3.0 + 0.0 + 1.0)


def test_an_append_finds_duplicates_against_the_remote_store(store_env, tmp_path):
    logs = Path(f"{store_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 2, bad=False), logs)
    res = _ingest(_source(tmp_path, "again.jsonl", 3, bad=False), logs, append=True)
    # u0 and u1 are already in the store: only u2's 4 rollouts are new
    assert res.runs["r1"].rollouts_out == 4
    assert _count(logs) == (12, 0.0 + 1.0 + 2.0)


def test_source_urls_are_read_and_named_in_the_manifest(store_env, tmp_path):
    src = _source(tmp_path, "a.jsonl", 2, bad=False)
    url = f"{store_env}/raw/a.jsonl"
    objstore.put_file(src, url)
    _ingest(Path(url), Path(f"{store_env}/logs"))
    man = store.run_manifest(f"{store_env}/logs", "r1")
    assert [s["path"] for s in man["sources"]] == [url]
    assert _count(f"{store_env}/logs") == (8, 1.0)


def test_a_source_url_stays_a_url_with_a_relative_workspace(store_env, tmp_path, monkeypatch):
    """Local sources are recorded by their absolute path; a downloaded one, staged under a
    relative ``DDAI_HOME``, is still named by its URL (not the absolute path of its copy)."""
    src = _source(tmp_path, "a.jsonl", 2, bad=False)
    url = f"{store_env}/raw/a.jsonl"
    objstore.put_file(src, url)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDAI_HOME", "home")
    _ingest(Path(url), Path(f"{store_env}/logs"))
    man = store.run_manifest(f"{store_env}/logs", "r1")
    assert [s["path"] for s in man["sources"]] == [url]


def test_a_missing_run_is_named_with_the_known_ones(store_env, tmp_path):
    _ingest(_source(tmp_path, "a.jsonl", 1, bad=False), Path(f"{store_env}/logs"))
    with pytest.raises(FileNotFoundError, match=r"nope not in (s3|gs)://.*known runs: r1"):
        store.snapshot(f"{store_env}/logs", ["nope"])


def test_distill_selection_columns_on_object_storage_equal_the_local_scan(store_env, tmp_path):
    from ddai.pipelines.distill import fetch

    src = _source(tmp_path, "a.jsonl", 4, bad=False)
    for logs in (Path(f"{store_env}/logs"), tmp_path / "local"):
        _ingest(src, logs)
        _ingest(_source(tmp_path, "b.jsonl", 2, bad=False, uid="v"), logs, append=True)
    remote = fetch.selection_columns(store.parquet_files(f"{store_env}/logs", ["r1"]))
    local = fetch.selection_columns(store.parquet_files(tmp_path / "local", ["r1"]))
    assert remote.column_names == local.column_names
    assert remote.to_pylist() == local.to_pylist()
    assert remote[fetch.FILE].to_pylist() == [0] * 16 + [1] * 8  # two parts, in log order
    rows = fetch_rows(store.parquet_files(f"{store_env}/logs", ["r1"]), remote, [3, 17])
    assert [(r["uid"], r["rollout_idx"]) for r in rows] == [("u0", 3), ("v0", 1)]


def test_side_tables_are_published_and_vouched_for_by_the_manifest(store_env, tmp_path):
    root = Path(__file__).resolve().parents[3]
    src = root / "fixtures/unified/focused_r2/unified_trajectory.jsonl"
    logs = f"{store_env}/logs"
    _ingest(src, Path(logs), run="u")
    man = store.run_manifest(logs, "u")
    assert man["side_tables"]  # the unified log has events that are not rollouts
    assert store.verify_partition(store.partition_dir(logs, "u")) is None
    table, rec = sorted(man["side_tables"].items())[0]
    (part,) = rec["parts"]  # this ingest's rows: one part object
    assert len(side_log.read_rows(logs, table, "u")) == rec["rows"] == part["rows"]
    objstore.put_bytes(f"{logs}/_side/{table}/{part['name']}", b"{}\n")
    said = store.verify_partition(store.partition_dir(logs, "u"))
    assert f"side table {table} part {part['name']} changed" in said


def _rows(uids: list[str], score: float = 1.0) -> list[dict]:
    return [
        {"uid": u, "rollout_idx": i, "response": RESP, "judge_score": score}
        for u in uids
        for i in range(2)
    ]


def test_write_run_replaces_and_appends_a_run_on_object_storage(store_env, tmp_path):
    logs = f"{store_env}/logs"
    store.write_run(logs, "r", _rows(["a", "b"]))
    store.write_run(logs, "r", _rows(["c"], 0.0), append=True)
    man = store.run_manifest(logs, "r")
    assert len(man["files"]) == 2 and man["rollouts_total"] == 6
    assert _count(logs, "r") == (6, 4.0)
    assert store.verify_partition(store.partition_dir(logs, "r")) is None
    store.write_run(logs, "r", _rows(["d"], 0.5))  # a replace: one version, one part
    assert _count(logs, "r") == (2, 1.0)
    assert len(store.run_manifest(logs, "r")["files"]) == 1
    assert not list(tmp_path.glob("*:"))  # nothing landed in a local folder named s3: or gs:


def test_a_rewrite_of_a_run_on_object_storage_commits_only_over_the_version_it_read(store_env):
    logs = f"{store_env}/logs"
    store.write_run(logs, "r", _rows(["a", "b"]))
    table, version = store.read_version(logs, "r")
    assert table.num_rows == 4
    # rescored in place, over the version read: committed
    store.write_run(logs, "r", table, normalize=False, if_unchanged=version)
    table, version = store.read_version(logs, "r")
    store.write_run(logs, "r", _rows(["x"], 0.0), append=True)  # another writer appends
    with pytest.raises(
        store.StoreConflict, match=r"run .r. changed in (s3|gs)://.*run the command"
    ):
        store.write_run(logs, "r", table, normalize=False, if_unchanged=version)
    assert _count(logs, "r") == (6, 4.0)  # the append is kept, nothing of the rewrite written


def test_a_rewrite_loses_a_race_at_the_conditional_put_and_writes_nothing(store_env, monkeypatch):
    logs = f"{store_env}/logs"
    store.write_run(logs, "r", _rows(["a"]))
    table, version = store.read_version(logs, "r")
    real_put = objstore.put_bytes

    def put_after_a_rival(url, data, **kw):
        if f"/{store.LOG_DIR}/" in url:  # the commit: the log's next delta
            monkeypatch.setattr(objstore, "put_bytes", real_put)
            store.write_run(logs, "r", _rows(["rival"]), append=True)
        return real_put(url, data, **kw)

    monkeypatch.setattr(objstore, "put_bytes", put_after_a_rival)
    with pytest.raises(store.StoreConflict, match="run 'r' changed"):
        store.write_run(logs, "r", table, normalize=False, if_unchanged=version)
    assert _count(logs, "r") == (4, 4.0)


def test_overlapping_appends_racing_on_object_storage_are_caught(store_env, tmp_path, monkeypatch):
    _overlapping_appends_are_caught(Path(f"{store_env}/logs"), tmp_path, monkeypatch)


def test_overlapping_appends_racing_on_a_local_store_are_caught(tmp_path, monkeypatch):
    _overlapping_appends_are_caught(tmp_path / "logs", tmp_path, monkeypatch)


def _race(monkeypatch, rival: Callable[[], object]) -> list[str]:
    """``store.stored_keys`` patched so that the first append to read the stored keys then sees
    ``rival`` (another append, which reads the keys too) commit first; the list it returns names
    the run once the rival ran."""
    real = store.stored_keys
    raced: list[str] = []

    def keys_then_a_rival(where, run, checked):
        yield from real(where, run, checked)
        if not raced:
            raced.append(run)
            rival()

    monkeypatch.setattr(store, "stored_keys", keys_then_a_rival)
    return raced


def _reversed(tmp_path: Path, name: str, n: int) -> Path:
    """``_source``'s rollouts with its lines in reverse order: the same rollouts, other bytes."""
    path = _source(tmp_path, name, n, bad=False)
    path.write_text("".join(reversed(path.read_text().splitlines(keepends=True))))
    return path


def _overlapping_appends_are_caught(logs: Path, tmp_path: Path, monkeypatch) -> None:
    """Append B reads the stored keys, then append A (same rollouts) commits, then B commits:
    B's duplicate check must see A's rollouts, as it would had A committed first."""
    _ingest(_source(tmp_path, "a.jsonl", 1, bad=False), logs)
    # the rival: the same rollouts in another order (the same file would be this very ingest,
    # recognised as stored already)
    rival = _reversed(tmp_path, "rival.jsonl", 3)
    raced = _race(monkeypatch, lambda: _ingest(rival, logs, append=True))
    with pytest.raises(store.StoreConflict, match=r"run 'r1': another append committed 8"):
        _ingest(_source(tmp_path, "mine.jsonl", 3, bad=False), logs, append=True)
    assert raced
    assert _count(logs) == (12, 3.0)  # u0 once, u1 and u2 from the rival only
    # run again (the rival does not run twice): the repeated rollouts are quarantined as stored,
    # nothing is added twice
    res = _ingest(_source(tmp_path, "mine.jsonl", 3, bad=False), logs, append=True)
    assert res.runs["r1"].rollouts_out == 0 and sum(res.runs["r1"].quarantined.values()) == 12
    assert _count(logs) == (12, 3.0)


def test_non_overlapping_appends_racing_on_a_local_store_both_land(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    _ingest(_source(tmp_path, "a.jsonl", 1, bad=False), logs)
    rival = _source(tmp_path, "w.jsonl", 2, bad=False, uid="w")
    raced = _race(monkeypatch, lambda: _ingest(rival, logs, append=True))
    _ingest(_source(tmp_path, "v.jsonl", 2, bad=False, uid="v"), logs, append=True)
    assert raced and _count(logs) == (4 + 8 + 8, 0.0 + 1.0 + 1.0)


def test_ingest_append_that_lost_a_race_exits_1_naming_the_run(store_env, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ddai.cli.app import app

    logs = f"{store_env}/logs"
    rival = _reversed(tmp_path, "rival.jsonl", 2)  # not mine's bytes
    _race(monkeypatch, lambda: _ingest(rival, Path(logs), append=True))
    src = _source(tmp_path, "mine.jsonl", 2, bad=False)
    args = ["ingest", str(src), "--logs", logs, "--run-id", "r1", "--append", "--no-progress"]
    res = CliRunner().invoke(app, args)
    said = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "run 'r1': another append committed 8 of this write's rollouts" in said
    assert _count(logs) == (8, 1.0)  # the rival's rollouts, once


def test_a_quarantine_written_before_parts_is_read_first_and_kept(s3_env, tmp_path):
    logs = Path(f"{s3_env}/logs")
    old = b'{"reason": "earlier", "source": "old.jsonl"}\n'
    objstore.put_bytes(f"{s3_env}/logs/_quarantine/r1.jsonl", old)  # one object, as before
    res = _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    (part,) = res.quarantine_files
    assert part.startswith(f"{s3_env}/logs/_quarantine/r1/part-")  # this ingest's own part
    q = quarantine.read(logs, "r1").decode().splitlines()
    assert [json.loads(x)["source"].rsplit("/", 1)[-1] for x in q] == ["old.jsonl", "a.jsonl"]
    assert objstore.read_bytes(f"{s3_env}/logs/_quarantine/r1.jsonl") == old  # not put again


def test_parts_put_before_they_were_listed_are_kept_by_the_first_listing(
    s3_env, tmp_path, monkeypatch
):
    logs = Path(f"{s3_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 1, bad=False), logs)
    # a part as an ingest put it before commits listed parts (read whole, unlisted)
    early = f"{s3_env}/logs/_quarantine/r1/part-00000000000000000001-aaaaaaaa.jsonl"
    objstore.put_bytes(early, b'{"source": "early.jsonl"}\n')
    monkeypatch.setenv(store.GRACE_ENV, "0")  # an unlisted part would go at this commit
    _ingest(_source(tmp_path, "b.jsonl", 1, uid="w"), logs, append=True)  # one bad line
    q = quarantine.read(logs, "r1").decode().splitlines()
    assert [json.loads(x)["source"].rsplit("/", 1)[-1] for x in q] == ["early.jsonl", "b.jsonl"]
    assert objstore.isfile(early) and store.verify_partition(f"{s3_env}/logs/run_id=r1") is None
