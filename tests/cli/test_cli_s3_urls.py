"""Flags that take a path take an ``s3://`` URL too (docs/workspace.md: "give a URL wherever a
path goes"), and a store that cannot be reached is a usage error naming the setting to fix. Each
command runs against moto's S3 server and again on local files, and the results must agree."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import objstore

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
REVIEW = FIX / "reviews" / "gt_review_round1.csv"
runner = CliRunner()


def _ddai(*args: str) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture
def s3_store(s3_env: str) -> str:
    """``s3_env``'s bucket with the fixture run ``focused_r1`` ingested under ``/logs``."""
    src = str(FIX / "logs" / "focused_r1.jsonl")
    _ddai("ingest", src, "--logs", f"{s3_env}/logs", "--no-progress")
    return s3_env


def test_analyze_out_on_s3_writes_the_object_not_a_local_folder(s3_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s3 = s3_store
    got = _ddai("analyze", "drop-keep", "--logs", f"{s3}/logs", "-o", f"{s3}/an/dk.csv")
    assert got["out"] == f"{s3}/an/dk.csv"
    assert not (tmp_path / "s3:").exists()  # was: a local folder `s3:` holding the file
    body = objstore.read_text(f"{s3}/an/dk.csv")
    man = json.loads(objstore.read_text(f"{s3}/an/dk.csv.manifest.json"))
    assert man["output_sha256"] == objstore.sha256(f"{s3}/an/dk.csv")

    local = tmp_path / "local"
    _ddai("ingest", str(FIX / "logs" / "focused_r1.jsonl"), "--logs", str(local / "logs"))
    _ddai("analyze", "drop-keep", "--logs", str(local / "logs"), "-o", str(local / "dk.csv"))
    assert body == (local / "dk.csv").read_text(encoding="utf-8")


def test_review_csvs_on_s3_are_read_by_focus_and_attribution(s3_store, tmp_path):
    s3 = s3_store
    objstore.put_file(REVIEW, f"{s3}/reviews/round1.csv")
    prev = pq.read_table(FIX / "dataset.parquet")
    pq.write_table(prev, tmp_path / "prev.parquet")
    objstore.put_file(tmp_path / "prev.parquet", f"{s3}/prev.parquet")

    args = ["curate", "focus", "--logs", f"{s3}/logs", "--run", "focused_r1", "--score-max", "0.5"]
    remote = _ddai(*args, "--prev", f"{s3}/prev.parquet", "--decisions", f"{s3}/reviews/round1.csv",
                   "--out", f"{s3}/r2.parquet")  # fmt: skip
    here = _ddai(*args, "--prev", str(tmp_path / "prev.parquet"), "--decisions", str(REVIEW),
                 "--out", str(tmp_path / "r2.parquet"))  # fmt: skip
    assert remote["flagged"] == here["flagged"] > 0
    assert remote["next_round"] == here["next_round"]

    att = ["analyze", "attribution", "--logs", f"{s3}/logs", "--run", "focused_r1"]
    a_remote = _ddai(*att, "--flags", f"{s3}/reviews/round1.csv")
    a_here = _ddai(*att, "--flags", str(REVIEW))
    assert a_remote["flags_loaded"] == a_here["flags_loaded"] > 0
    assert a_remote["runs"] == a_here["runs"]


def test_a_missing_review_csv_on_s3_names_the_url(s3_store):
    res = runner.invoke(
        app,
        ["analyze", "attribution", "--logs", f"{s3_store}/logs", "--flags", f"{s3_store}/no.csv"],
    )
    assert res.exit_code == 2
    assert f"{s3_store}/no.csv not found" in res.output


def test_verify_gt_reads_its_decisions_from_s3(s3_env, tmp_path):
    s3 = s3_env
    objstore.put_file(REVIEW, f"{s3}/reviews/round1.csv")
    objstore.put_file(FIX / "dataset.parquet", f"{s3}/dataset.parquet")
    remote = _ddai("curate", "verify-gt", "--dataset", f"{s3}/dataset.parquet",
                   "--decisions", f"{s3}/reviews/round1.csv", "--out-dir", f"{s3}/vg")  # fmt: skip
    here = _ddai("curate", "verify-gt", "--dataset", str(FIX / "dataset.parquet"),
                 "--decisions", str(REVIEW), "--out-dir", str(tmp_path / "vg"))  # fmt: skip
    assert remote["excluded"] == here["excluded"] > 0 and remote["kept"] == here["kept"]


def test_lineage_over_s3_keeps_the_rows_each_input_gave(s3_env):
    s3 = s3_env
    objstore.put_file(FIX / "dataset.parquet", f"{s3}/dataset.parquet")
    logs = f"{s3}/logs"
    for run in ("phase1", "focused_r1"):
        _ddai("ingest", str(FIX / "logs" / f"{run}.jsonl"), "--logs", logs, "--no-progress")
    _ddai("curate", "bucket", "--dataset", f"{s3}/dataset.parquet", "--logs", logs,
          "--run", "phase1", "--out-dir", f"{s3}/cur")  # fmt: skip
    a, zero = f"{s3}/cur/curriculum_bucket_a.parquet", f"{s3}/cur/curriculum_bucket_0.parquet"
    f = _ddai("curate", "focus", "--bucket-a", a, "--bucket-0", zero, "--logs", logs,
              "--run", "focused_r1", "--out", f"{s3}/r1.parquet")  # fmt: skip
    graph = _ddai("lineage", f"{s3}/r1.parquet", "--check")
    rows = {(e["source"], e["target"]): e["rows"] for e in graph["edges"]}
    # was None: the manifest keyed its contributions by pathlib's `s3:/…`
    assert rows[(a, f"{s3}/r1.parquet")] == f["hard_a"]
    assert rows[(zero, f"{s3}/r1.parquet")] == f["round_1"] - f["hard_a"]


def test_query_out_on_s3_reports_the_url(s3_store):
    url = f"{s3_store}/out/q.csv"
    sql = "SELECT count(*) AS n FROM rollouts"
    got = _ddai("query", sql, "--logs", f"{s3_store}/logs", "--format", "csv", "-o", url)
    assert got["out"] == url  # was 's3:/…'
    assert objstore.read_text(url).splitlines() == ["n", "144"]
    res = runner.invoke(app, ["query", sql, "--logs", f"{s3_store}/logs", "-o", url])
    assert res.exit_code == 0 and f"wrote 1 rows to {url}" in res.output


def test_an_unreachable_endpoint_is_a_usage_error_naming_the_setting(s3_env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    src = str(FIX / "logs" / "phase1.jsonl")
    for args in (["runs", "--logs", f"{s3_env}/logs"],
                 ["ingest", src, "--logs", f"{s3_env}/logs", "--no-progress"]):  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output  # was: a botocore traceback, exit 1
        assert "http://127.0.0.1:9" in res.output and "AWS_ENDPOINT_URL" in res.output


def _fresh_clients() -> None:
    import s3fs

    objstore._fsspec_fs.cache_clear()
    objstore._arrow_fs.cache_clear()
    s3fs.S3FileSystem.clear_instance_cache()


def test_missing_credentials_are_a_usage_error_naming_the_variables(
    s3_env, monkeypatch, tmp_path, request
):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # a new process has no client yet: drop the ones made with credentials, and after the test
    # the ones made without
    _fresh_clients()
    request.addfinalizer(_fresh_clients)
    res = runner.invoke(app, ["runs", "--logs", f"{s3_env}/logs"])
    assert res.exit_code == 2, res.output
    assert "AWS_ACCESS_KEY_ID" in res.output and "AWS_SECRET_ACCESS_KEY" in res.output


def test_a_missing_bucket_is_named_with_how_to_create_it(s3_env, tmp_path):
    # was: ingest "run 'x' … was refused: The specified bucket does not exist", runs "ingest
    # logs first", an output put there the client's bare "The specified bucket does not exist"
    gone = "s3://nobucket-ddai"
    src = str(FIX / "logs" / "phase1.jsonl")
    here = str(tmp_path / "logs")
    _ddai("ingest", src, "--logs", here, "--no-progress")
    for args in (["runs", "--logs", f"{gone}/logs"],
                 ["ingest", src, "--logs", f"{gone}/logs", "--no-progress"],
                 ["query", "SELECT 1", "--logs", f"{gone}/logs"],
                 ["query", "SELECT 1 AS n", "--logs", here, "-o", f"{gone}/q.csv"]):  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        out = " ".join(res.output.split())
        assert out.count(f"bucket {gone} does not exist") == 1, out  # said once
        assert f"aws s3 mb {gone} --endpoint-url" in out and "ingest logs first" not in out


def test_an_input_in_a_missing_bucket_names_the_bucket(s3_store, tmp_path):
    # was: "dataset s3://nobucket-ddai/d.parquet not found", as if only the object were missing
    gone = "s3://nobucket-ddai"
    s3 = s3_store
    logs = ["--logs", f"{s3}/logs"]
    objstore.put_file(FIX / "dataset.parquet", f"{s3}/dataset.parquet")
    for args in (
        ["curate", "bucket", *logs, "--run", "focused_r1", "--dataset", f"{gone}/d.parquet",
         "--out-dir", str(tmp_path / "b")],
        ["curate", "bucket", "--dataset", f"{s3}/dataset.parquet", "--scores",
         f"{gone}/s.csv", "--score-col", "s", "--out-dir", str(tmp_path / "b")],
        ["curate", "focus", *logs, "--run", "focused_r1", "--score-max", "0.5",
         "--prev", f"{gone}/prev.parquet", "--out", str(tmp_path / "r2.parquet")],
        ["curate", "verify-gt", "--dataset", f"{gone}/d.parquet", "--decisions", str(REVIEW),
         "--out-dir", str(tmp_path / "vg")],
        ["report", *logs, "--datasets", f"{gone}/d.parquet", "-o", str(tmp_path / "r.html")],
        ["report", *logs, "--flags", f"{gone}/f.csv", "-o", str(tmp_path / "r.html")],
    ):  # fmt: skip
        res = runner.invoke(app, args)
        out = " ".join(res.output.split())
        assert res.exit_code == 2, out
        assert out.count(f"bucket {gone} does not exist") == 1, out
        assert f"aws s3 mb {gone} --endpoint-url" in out, out
    # a missing object in a bucket that exists is still just "not found"
    res = runner.invoke(app, ["curate", "verify-gt", "--dataset", f"{s3}/no.parquet",
                              "--decisions", str(REVIEW), "--out-dir", str(tmp_path / "vg")])  # fmt: skip
    assert res.exit_code == 2 and f"{s3}/no.parquet not found" in " ".join(res.output.split())
    assert "does not exist" not in res.output


def test_an_output_in_a_missing_gcs_bucket_is_named_with_how_to_create_it(gs_env, tmp_path):
    # was: "error: http://127.0.0.1:…/upload/storage/v1/b/nobucket-ddai/o" (gcsfs's 404)
    here = str(tmp_path / "logs")
    _ddai("ingest", str(FIX / "logs" / "phase1.jsonl"), "--logs", here, "--no-progress")
    res = runner.invoke(
        app, ["query", "SELECT 1 AS n", "--logs", here, "-o", "gs://nobucket-ddai/q.csv"]
    )
    out = " ".join(res.output.split())
    assert res.exit_code == 2, out
    assert out.count("bucket gs://nobucket-ddai does not exist") == 1, out
    assert "`gcloud storage buckets create gs://nobucket-ddai`" in out and "/upload/" not in out
