"""Every command's ``--json`` summary validates against its schema in ``docs/schemas/`` (the one
documented shape: snake_case keys, numbers as numbers, lists as lists, paths as strings), and
every schema there is exercised by a real run here."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from cli_schemas import SCHEMAS, check
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "fixtures"  # the committed small synthetic world


def _run(args: list[str]) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> set[str]:
    """Runs the funnel, distillation, analyses, report and judge on the small world, checking
    each summary; returns the schema names checked."""
    tmp = tmp_path_factory.mktemp("schemas")
    logs, funnel = tmp / "logs", tmp / "funnel"
    done: set[str] = set()

    def c(name: str, args: list[str]) -> dict:
        data = _run(args)
        check(name, data)
        done.add(name)
        return data

    c("fixtures-make", ["fixtures", "make", str(tmp / "w"), "--size", "10", "--no-progress"])
    c(
        "ingest",
        ["ingest", *map(str, sorted((WORLD / "logs").glob("*.jsonl"))), "--logs", str(logs)],
    )
    c("runs", ["runs", "--logs", str(logs)])
    bucket = ["curate", "bucket", "--dataset", str(WORLD / "dataset.parquet"), "--logs", str(logs),
              "--run", "phase1", "--out-dir", str(funnel)]  # fmt: skip
    assert c("curate-bucket", bucket)["skipped_unchanged"] is False
    assert c("curate-bucket", bucket)["skipped_unchanged"] is True
    verify = ["curate", "verify-gt", "--dataset", str(funnel / "curriculum_bucket_0.parquet"),
              "--decisions", str(WORLD / "reviews" / "gt_review_bucket0.csv"),
              "--out-dir", str(funnel)]  # fmt: skip
    c("curate-verify-gt", verify)
    r1 = funnel / "focused_round1.parquet"
    c("curate-focus", ["curate", "focus", "--bucket-a", str(funnel / "curriculum_bucket_a.parquet"),
                       "--bucket-0", str(funnel / "curriculum_bucket_0_filtered.parquet"),
                       "--logs", str(logs), "--run", "curriculum", "--out", str(r1)])  # fmt: skip
    c("curate-plan", ["curate", "plan", "--logs", str(logs), "--run", "focused_r1"])
    c("lineage", ["lineage", str(r1), "--check"])
    sft = tmp / "sft.parquet"
    distill = ["distill", "--logs", str(logs), "--run", "focused_r1", "--no-progress"]
    assert c("distill", [*distill, "--out", str(sft)])["samples_written"] > 0
    assert c("distill", [*distill, "--out", str(tmp / "dry.parquet"), "--dry-run"])["dry_run"]
    c("distill-check", ["distill", "check", str(sft), "--out", str(tmp / "c.parquet"),
                        "--no-progress"])  # fmt: skip
    c("distill-convert", ["distill", "convert", str(sft), "--to", "messages", "--out",
                          str(tmp / "m.parquet")])  # fmt: skip
    c("analyze-attribution", ["analyze", "attribution", "--logs", str(logs), "--run", "focused_r1"])
    c("analyze-latency", ["analyze", "latency", "--logs", str(logs)])
    c("analyze-drop-keep", ["analyze", "drop-keep", "--logs", str(logs), "--run", "focused_r1"])
    report = c("report", ["report", "--logs", str(logs), "--out", str(tmp / "r.html"),
                          "--compare", "focused_r1", "--compare", "focused_r2", "--no-progress"])  # fmt: skip
    assert report["bytes"] == (tmp / "r.html").stat().st_size  # a number, not "2.1 MB"
    judge = ["judge", "--logs", str(logs), "--run", "focused_r2", "--judge", "local",
             "--no-progress"]  # fmt: skip
    plan = c("judge", [*judge, "--dry-run"])
    ran = c("judge", judge)
    assert plan["to_call"] == ran["usage"]["ddai judge"]["calls"]
    c("backends-check", ["backends", "check", "--no-ping"])
    c("pointer-world", ["pointer", "world", str(tmp / "pw"), "--queries", "40", "--demos", "60"])
    return done


def test_each_summary_matches_its_schema(validated):
    assert len(validated) >= 18


def test_every_schema_is_checked_against_a_real_run(validated):
    documented = {p.stem for p in SCHEMAS.glob("*.json")}
    # demo's schema is checked by tests/cli/test_cli_demo.py (it runs the whole loop)
    assert documented - validated == {"demo"}


def test_a_schema_catches_a_label_key_and_a_preformatted_number():
    with pytest.raises(AssertionError, match="skipped \\(unchanged\\)"):
        check("curate-bucket", {**_bucket_sample(), "skipped (unchanged)": False})
    with pytest.raises(jsonschema.ValidationError):
        check("curate-bucket", {**_bucket_sample(), "bucket_b": "269 / 466 / 265"})


def _bucket_sample() -> dict:
    return {
        "dataset": "d.parquet", "score": "ndcg_mean", "bucket_b": 1, "bucket_a": 2, "bucket_0": 3,
        "no_score": 0, "duplicate_ids": 0, "scored_ids_not_in_the_dataset": 0,
        "rule": "B > 0.7 >= A >= 0.1 > 0", "outputs": {"b": "b.parquet"},
        "skipped_unchanged": False,
    }  # fmt: skip
