"""``ddai report`` with curated datasets on object storage (moto's S3 server): the funnel section
names the same steps and rows as over the same files on local disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import objstore
from ddai.reports import ReportConfig, build_report

FIX = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


def _ddai(*args: str) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _funnel(root: str, dataset: str) -> None:
    """bucket then focus into ``root`` (a folder or a URL) over ``dataset``."""
    logs = f"{root}/logs"
    for run in ("phase1", "focused_r1"):
        _ddai("ingest", str(FIX / "logs" / f"{run}.jsonl"), "--logs", logs, "--no-progress")
    _ddai("curate", "bucket", "--dataset", dataset, "--logs", logs, "--run", "phase1",
          "--out-dir", f"{root}/cur")  # fmt: skip
    cur = f"{root}/cur"
    _ddai("curate", "focus", "--bucket-a", f"{cur}/curriculum_bucket_a.parquet",
          "--bucket-0", f"{cur}/curriculum_bucket_0.parquet", "--logs", logs,
          "--run", "focused_r1", "--out", f"{cur}/r1.parquet")  # fmt: skip


def _shape(stats: dict, root: str) -> list[tuple]:
    """The funnel's nodes without where they lie: (name, kind, step, rows, rows in, dropped)."""
    keys = ("name", "kind", "step", "rows", "rows_in", "dropped")
    return sorted(tuple(str(n[k]).replace(root, "ROOT") for k in keys) for n in stats["nodes"])


@pytest.fixture
def both(s3_env, tmp_path):
    """(local root, s3 root) each holding the same funnel over the fixture dataset."""
    objstore.put_file(FIX / "dataset.parquet", f"{s3_env}/dataset.parquet")
    _funnel(s3_env, f"{s3_env}/dataset.parquet")
    here = str(tmp_path / "here")
    _funnel(here, str(FIX / "dataset.parquet"))
    return here, s3_env


@pytest.mark.parametrize("how", ["--datasets", "--datasets-dir"])
def test_report_over_s3_datasets_names_the_steps_and_rows_of_local_ones(both, tmp_path, how):
    # was: "--datasets file(s) not found: s3:/…" (a local existence check on a mangled URL)
    got = {}
    for root in both:
        given = f"{root}/cur/r1.parquet" if how == "--datasets" else f"{root}/cur"
        out = str(tmp_path / f"{len(got)}.html")
        kw = {"datasets": [Path(given)]} if how == "--datasets" else {"datasets_dir": Path(given)}
        cfg = ReportConfig(logs=Path(f"{root}/logs"), out=Path(out), progress=False, **kw)
        got[root] = build_report(cfg)["stats"]["funnel"]
    here, s3 = both
    assert got[s3]["datasets"] == got[here]["datasets"] >= 1
    assert _shape(got[s3], s3) == _shape(got[here], here)
    steps = [n for n in got[s3]["nodes"] if n["kind"] == "step"]
    assert {n["step"].split(".")[1] for n in steps} == {"bucket", "focus"}
    assert all(n["rows"] for n in steps)
    assert got[s3]["links"] == got[here]["links"] != []


def test_report_reads_flags_from_s3_as_from_disk(s3_env, tmp_path):
    # was: "--flags file(s) not found: s3:/…" before the attribution section, which reads URLs
    review = FIX / "reviews" / "gt_review_round1.csv"
    objstore.put_file(review, f"{s3_env}/round1.csv")
    logs = tmp_path / "logs"
    _ddai("ingest", str(FIX / "logs" / "focused_r1.jsonl"), "--logs", str(logs), "--no-progress")
    got = []
    for flags in (review, f"{s3_env}/round1.csv"):
        cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False, flags=[Path(flags)])
        got.append(build_report(cfg)["stats"]["attribution"])
    assert got[0] == got[1] and got[0]


def test_serve_report_draws_the_funnel_of_an_s3_datasets_dir(both):
    # was: "--datasets-dir s3:/… is not a folder" before the explorer started
    from serve_world import local

    from ddai.reports.serve import ServeConfig
    from ddai.reports.serve.app import create_app

    _, s3 = both
    cfg = ServeConfig(logs=Path(f"{s3}/logs"), datasets_dir=Path(f"{s3}/cur"))
    client = local(create_app(cfg))
    page = client.get("/report")
    assert page.status_code == 200
    assert 'id="fig-funnel-sankey"' in page.text and "curriculum_bucket_a" in page.text
    assert client.get("/report").text == page.text and client.app.state.report["count"] == 1
