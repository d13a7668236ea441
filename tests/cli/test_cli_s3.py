"""The loop on a log store and funnel files in S3 (moto's server on 127.0.0.1) and in GCS (the fake
JSON-API server, tests/support/gcs_fake.py): ingest, query, curate bucket, distill and report give what
they give on local files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import objstore

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
runner = CliRunner()


def _ddai(*args: str) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _table(url: str):
    return pq.read_table(objstore.key_of(url), filesystem=objstore.arrow_fs(url))


def _both(s3: str, local: Path, *args: str) -> tuple[dict, dict]:
    """Run one command against the S3 locations and the same with local ones."""
    remote = _ddai(*args)
    here = _ddai(*(a.replace(s3, str(local)) for a in args))
    return remote, here


def test_the_loop_on_object_storage_matches_the_loop_on_local_files(store_env, tmp_path):
    s3, local = store_env, tmp_path  # s3:// or gs://
    objstore.put_file(FIX / "dataset.parquet", f"{s3}/data/dataset.parquet")
    (local / "data").mkdir()
    (local / "data" / "dataset.parquet").write_bytes((FIX / "dataset.parquet").read_bytes())
    logs = f"{s3}/logs"

    srcs = [str(FIX / "logs" / f"{r}.jsonl") for r in ("phase1", "focused_r1")]
    ing, ing_local = _both(s3, local, "ingest", *srcs, "--logs", logs, "--no-progress")
    assert ing["runs"] == ing_local["runs"] == {"focused_r1": 144, "phase1": 144}

    res = runner.invoke(
        app,
        ["query", "SELECT run_id, count(*) AS n, round(avg(ndcg), 6) AS m FROM rollouts "
         "GROUP BY 1 ORDER BY 1", "--logs", logs, "--format", "csv"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.output)))
    assert [(r["run_id"], r["n"]) for r in rows] == [("focused_r1", "144"), ("phase1", "144")]

    bucket_args = ["curate", "bucket", "--dataset", f"{s3}/data/dataset.parquet", "--logs", logs]
    bucket_args += ["--run", "phase1", "--out-dir", f"{s3}/curated"]
    b, b_local = _both(s3, local, *bucket_args)
    assert b["bucket_a"] == b_local["bucket_a"] and b["bucket_0"] == b_local["bucket_0"]
    for name in ("a", "b", "0"):
        url = f"{s3}/curated/curriculum_bucket_{name}.parquet"
        mine = _table(url)
        theirs = pq.read_table(local / "curated" / f"curriculum_bucket_{name}.parquet")
        assert mine["id"].to_pylist() == theirs["id"].to_pylist()
        man = json.loads(objstore.read_text(f"{url}.manifest.json"))
        assert man["output_sha256"] == objstore.sha256(url)
        assert man["inputs"][0]["path"] == f"{s3}/data/dataset.parquet"
        assert man["inputs"][1]["path"] == f"{logs}/run_id=phase1"
    assert _ddai(*bucket_args)["skipped_unchanged"] is True

    focus_args = ["curate", "focus", "--bucket-a", f"{s3}/curated/curriculum_bucket_a.parquet"]
    focus_args += ["--bucket-0", f"{s3}/curated/curriculum_bucket_0.parquet", "--logs", logs]
    focus_args += ["--run", "focused_r1", "--out", f"{s3}/focused_round1.parquet"]
    f, f_local = _both(s3, local, *focus_args)
    assert f["round_1"] == f_local["round_1"] > 0
    ids = _table(f"{s3}/focused_round1.parquet")["id"].to_pylist()
    assert ids == pq.read_table(local / "focused_round1.parquet")["id"].to_pylist()

    runs = _ddai("runs", "--logs", logs)["runs"]
    assert [(r["run_id"], r["rollouts"]) for r in runs] == [("focused_r1", 144), ("phase1", 144)]

    res = runner.invoke(app, ["lineage", f"{s3}/focused_round1.parquet", "--check", "--json"])
    assert res.exit_code == 0, res.output
    graph = json.loads(res.output)
    ids = {n["id"]: n for n in graph["nodes"]}
    assert ids[f"{logs}/run_id=focused_r1"]["kind"] == "log"
    assert ids[f"{s3}/curated/curriculum_bucket_a.parquet"]["kind"] == "step"
    assert ids[f"{s3}/data/dataset.parquet"]["kind"] == "file"
    assert not [n for n in graph["nodes"] if n.get("mismatch")]

    d, d_local = _both(
        s3,
        local,
        "distill",
        "--logs",
        logs,
        "--run",
        "focused_r1",
        "--out",
        f"{s3}/sft/sft.parquet",
    )
    assert d["samples_written"] == d_local["samples_written"] > 0
    sft = _table(f"{s3}/sft/sft.parquet")
    assert sft["uid"].to_pylist() == pq.read_table(local / "sft" / "sft.parquet")["uid"].to_pylist()

    r = _ddai("report", "--logs", logs, "--out", f"{s3}/report.html", "--no-progress")
    assert r["out"] == f"{s3}/report.html" and r["rollouts"] == 288
    page = objstore.read_text(f"{s3}/report.html")
    assert page.startswith("<!DOCTYPE html>") or page.lstrip().lower().startswith("<!doctype")
    man = json.loads(objstore.read_text(f"{s3}/report.html.manifest.json"))
    assert man["output_sha256"] == objstore.sha256(f"{s3}/report.html")


def test_a_missing_store_on_object_storage_is_a_usage_error(store_env):
    res = runner.invoke(app, ["query", "SELECT 1 FROM rollouts", "--logs", f"{store_env}/nothing"])
    assert res.exit_code == 2
    assert f"{store_env}/nothing does not exist" in res.output


def test_bucket_from_a_score_table_on_s3(s3_env, tmp_path):
    ids = pq.read_table(FIX / "dataset.parquet")["id"].to_pylist()
    scores = {i: [0.9, 0.5, 0.05][n % 3] for n, i in enumerate(ids)}
    csv_text = "id,phase1_ndcg\n" + "".join(f"{i},{s}\n" for i, s in scores.items())
    objstore.put_bytes(f"{s3_env}/scores.csv", csv_text.encode())
    objstore.put_file(FIX / "dataset.parquet", f"{s3_env}/dataset.parquet")
    out = _ddai(
        "curate", "bucket", "--dataset", f"{s3_env}/dataset.parquet",
        "--scores", f"{s3_env}/scores.csv", "--score-col", "phase1_ndcg", "--out-dir", f"{s3_env}/b",
    )  # fmt: skip
    want = [sum(1 for s in scores.values() if s == v) for v in (0.9, 0.5, 0.05)]
    assert [out["bucket_b"], out["bucket_a"], out["bucket_0"]] == want
    b = _table(f"{s3_env}/b/curriculum_bucket_b.parquet")
    assert sorted(b["id"].to_pylist()) == sorted(i for i, s in scores.items() if s == 0.9)
