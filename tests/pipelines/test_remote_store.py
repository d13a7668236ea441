"""A log store on object storage: staged ingest, conditional commits, reads (moto S3 server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddai.pipelines import objstore, query, remote_store, store
from ddai.pipelines.ingest import IngestConfig, ingest

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


def test_ingest_query_and_verify_on_s3(s3_env, tmp_path):
    logs = f"{s3_env}/logs"
    res = _ingest(_source(tmp_path, "a.jsonl", 3), Path(logs))
    assert res.runs["r1"].rollouts_out == 12
    assert store.list_runs(logs) == ["r1"]
    man = store.run_manifest(logs, "r1")
    assert man["rollouts_out"] == 12 and man["rows_in"] == 13
    assert store.verify_partition(store.partition_dir(logs, "r1")) is None  # hashes match
    # the quarantine went to the store too, with the bad line
    q = objstore.read_text(f"{logs}/_quarantine/r1.jsonl").splitlines()
    assert len(q) == 1 and json.loads(q[0])["raw"].strip() == "{broken"
    # judge 1 for rollouts i < u: u0 none, u1 one, u2 two
    assert _count(logs) == (12, 3.0)


@pytest.mark.parametrize("scan", ["arrow", "fsspec"])
def test_both_scans_read_what_a_local_store_reads(s3_env, tmp_path, monkeypatch, scan):
    src = _source(tmp_path, "a.jsonl", 5, bad=False)
    _ingest(src, Path(f"{s3_env}/logs"))
    _ingest(src, tmp_path / "local")
    monkeypatch.setenv(query.SCAN_ENV, scan)
    sql = "SELECT uid, count(*), sum(judge_score) FROM rollouts GROUP BY 1 ORDER BY 1"
    remote = query.connect(f"{s3_env}/logs").execute(sql).fetchall()
    local = query.connect(tmp_path / "local").execute(sql).fetchall()
    assert remote == local and len(remote) == 5


def test_append_keeps_both_and_quarantine_accumulates(s3_env, tmp_path):
    logs = Path(f"{s3_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    _ingest(_source(tmp_path, "b.jsonl", 2, uid="v"), logs, append=True)
    man = store.run_manifest(logs, "r1")
    assert len(man["files"]) == 2 and man["rollouts_total"] == 12 + 8
    assert len(man["history"]) == 1 and man["history"][0]["rollouts_out"] == 12
    assert _count(logs) == (20, 3.0 + 1.0)
    q = objstore.read_text(f"{s3_env}/logs/_quarantine/r1.jsonl").splitlines()
    assert [json.loads(x)["source"].rsplit("/", 1)[-1] for x in q] == ["a.jsonl", "b.jsonl"]


def test_replace_keeps_old_parts_through_the_grace_period(s3_env, tmp_path, monkeypatch):
    logs = Path(f"{s3_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    first = store.run_manifest(logs, "r1")["files"][0]["name"]
    _ingest(_source(tmp_path, "b.jsonl", 2), logs)
    names = objstore.listdir(f"{s3_env}/logs/run_id=r1")
    assert first in names  # a reader that listed it a moment ago still finds it
    assert _count(logs) == (8, 1.0)  # but only the new version is read
    monkeypatch.setenv(remote_store.GRACE_ENV, "0")
    man = store.run_manifest(logs, "r1")
    assert remote_store.collect_garbage(f"{s3_env}/logs/run_id=r1", man) == [first]
    assert objstore.listdir(f"{s3_env}/logs/run_id=r1") == sorted(
        ["_manifest.json", man["files"][0]["name"]]
    )


def test_a_concurrent_append_between_read_and_commit_is_merged_not_lost(
    s3_env, tmp_path, monkeypatch
):
    logs = Path(f"{s3_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 3), logs)
    real_put = objstore.put_bytes
    raced = []

    def put_after_a_rival(url, data, **kw):
        if url.endswith(store.MANIFEST) and not raced:
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


def test_an_append_finds_duplicates_against_the_remote_store(s3_env, tmp_path):
    logs = Path(f"{s3_env}/logs")
    _ingest(_source(tmp_path, "a.jsonl", 2, bad=False), logs)
    res = _ingest(_source(tmp_path, "again.jsonl", 3, bad=False), logs, append=True)
    # u0 and u1 are already in the store: only u2's 4 rollouts are new
    assert res.runs["r1"].rollouts_out == 4
    assert _count(logs) == (12, 0.0 + 1.0 + 2.0)


def test_source_urls_are_read_and_named_in_the_manifest(s3_env, tmp_path):
    src = _source(tmp_path, "a.jsonl", 2, bad=False)
    url = f"{s3_env}/raw/a.jsonl"
    objstore.put_file(src, url)
    _ingest(Path(url), Path(f"{s3_env}/logs"))
    man = store.run_manifest(f"{s3_env}/logs", "r1")
    assert [s["path"] for s in man["sources"]] == [url]
    assert _count(f"{s3_env}/logs") == (8, 1.0)


def test_a_missing_run_is_named_with_the_known_ones(s3_env, tmp_path):
    _ingest(_source(tmp_path, "a.jsonl", 1, bad=False), Path(f"{s3_env}/logs"))
    with pytest.raises(FileNotFoundError, match=r"nope not in s3://.*known runs: r1"):
        store.snapshot(f"{s3_env}/logs", ["nope"])


def test_distill_selection_columns_on_s3_equal_the_local_scan(s3_env, tmp_path):
    from ddai.pipelines.distill import fetch

    src = _source(tmp_path, "a.jsonl", 4, bad=False)
    for logs in (Path(f"{s3_env}/logs"), tmp_path / "local"):
        _ingest(src, logs)
        _ingest(_source(tmp_path, "b.jsonl", 2, bad=False, uid="v"), logs, append=True)
    remote = fetch.selection_columns(store.parquet_files(f"{s3_env}/logs", ["r1"]))
    local = fetch.selection_columns(store.parquet_files(tmp_path / "local", ["r1"]))
    assert remote.column_names == local.column_names
    assert remote.to_pylist() == local.to_pylist()
    assert remote[fetch.FILE].to_pylist() == [0] * 16 + [1] * 8  # two parts, in log order
    rows = fetch.fetch_rows(store.parquet_files(f"{s3_env}/logs", ["r1"]), remote, [3, 17])
    assert [(r["uid"], r["rollout_idx"]) for r in rows] == [("u0", 3), ("v0", 1)]


def test_side_tables_are_published_and_vouched_for_by_the_manifest(s3_env, tmp_path):
    root = Path(__file__).resolve().parents[2]
    src = root / "fixtures/unified/focused_r2/unified_trajectory.jsonl"
    logs = f"{s3_env}/logs"
    _ingest(src, Path(logs), run="u")
    man = store.run_manifest(logs, "u")
    assert man["side_tables"]  # the unified log has events that are not rollouts
    assert store.verify_partition(store.partition_dir(logs, "u")) is None
    table, rec = sorted(man["side_tables"].items())[0]
    text = objstore.read_text(f"{logs}/_side/{table}/u.jsonl")
    assert len(text.splitlines()) == rec["rows"]
    objstore.put_bytes(f"{logs}/_side/{table}/u.jsonl", b"{}\n")
    assert f"side table {table} changed" in store.verify_partition(store.partition_dir(logs, "u"))


def test_other_writers_refuse_a_store_on_object_storage(s3_env):
    with pytest.raises(ValueError, match="only `ddai ingest` writes runs"):
        store.write_run(f"{s3_env}/logs", "r", [{"uid": "u", "rollout_idx": 0}])
