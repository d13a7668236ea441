"""Flags that take a path take an ``s3://`` URL too (docs/workspace.md: "give a URL wherever a
path goes"), and a store that cannot be reached is a usage error naming the setting to fix. Each
command runs against moto's S3 server and again on local files, and the results must agree."""

from __future__ import annotations

import json
from pathlib import Path

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
