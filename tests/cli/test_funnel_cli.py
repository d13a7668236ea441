"""``ddai curate …`` and ``ddai lineage`` through the Typer app: summaries, JSON, exit codes."""

from __future__ import annotations

import json

import polars as pl
import pytest
from cli_schemas import check
from support.funnel_data import group, write_dataset, write_log
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import io

runner = CliRunner()


def _inputs(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2", "train_3"])
    scores = tmp_path / "s.csv"
    pl.DataFrame({"id": ["train_1", "train_2", "train_3"], "p1": [0.9, 0.5, 0.0]}).write_csv(scores)
    logs = tmp_path / "logs"
    write_log(
        logs,
        "cur",
        group("train_2", "reward", [0.1, 0.2], judge_score=1.0)
        + group("train_3", "reward", [0.0, 0.0], judge_score=0.0),
    )
    return ds, scores, logs


def _bucket_then_focus(ds, scores, logs, out) -> None:
    """``curate bucket`` of ``ds`` by ``scores``, then round 1's ``curate focus`` over run ``cur``
    into ``out/r1.parquet``."""
    args = ["curate", "bucket", "--dataset", str(ds), "--scores", str(scores), "--score-col",
            "p1", "--out-dir", str(out)]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    args = ["curate", "focus", "--bucket-a", str(out / "curriculum_bucket_a.parquet"),
            "--bucket-0", str(out / "curriculum_bucket_0.parquet"), "--logs", str(logs), "--run",
            "cur", "--out", str(out / "r1.parquet")]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output


def test_bucket_focus_lineage_plan(tmp_path):
    ds, scores, logs = _inputs(tmp_path)
    out = tmp_path / "out"
    r = runner.invoke(
        app,
        ["curate", "bucket", "--dataset", str(ds), "--scores", str(scores), "--score-col", "p1",
         "--out-dir", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (data["bucket_b"], data["bucket_a"], data["bucket_0"]) == (1, 1, 1)
    assert data["skipped_unchanged"] is False

    r = runner.invoke(
        app,
        ["curate", "verify-gt", "--dataset", str(out / "curriculum_bucket_0.parquet"),
         "--decisions", str(_review(tmp_path)), "--out-dir", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kept"] == 1

    r = runner.invoke(
        app,
        ["curate", "focus", "--bucket-a", str(out / "curriculum_bucket_a.parquet"),
         "--bucket-0", str(out / "curriculum_bucket_0_filtered.parquet"), "--logs", str(logs),
         "--run", "cur", "--out", str(out / "r1.parquet"), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["round_1"] == 2  # train_2 (mean 0.15) + train_3

    r = runner.invoke(app, ["lineage", str(out / "r1.parquet"), "--check"])
    assert r.exit_code == 0, r.output
    assert "lineage" in r.stdout and "inputs changed since use" in r.stdout

    r = runner.invoke(app, ["lineage", str(out / "r1.parquet"), "--json"])
    graph = json.loads(r.stdout)
    kinds = [n["kind"] for n in graph["nodes"]]
    assert kinds.count("step") == 4  # bucket A, bucket 0, its verified copy, round 1
    assert {n["kind"] for n in graph["nodes"]} == {"file", "step", "log", "source"}

    r = runner.invoke(
        app,
        ["curate", "plan", "--logs", str(logs), "--run", "cur", "--n-agent", "4",
         "--prior", "none", "--price-per-call", "0.5", "--bucket", str(out / "r1.parquet"),
         "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    row = next(x for x in plan["rows"] if x["bucket"] == "all")
    # train_2 always succeeds, train_3 never: no mixed groups; 2 prompts × 4 × 2 calls × $0.5
    assert row["mixed_share"] == 0.0 and row["cost_usd"] == 8.0
    assert plan["recommend"]["all"] is None


def _review(tmp_path):
    p = tmp_path / "review.csv"
    p.write_text("uid,verdict,reason\n", encoding="utf-8")
    return p


def test_rerun_reports_skip(tmp_path):
    ds, scores, _ = _inputs(tmp_path)
    args = ["curate", "bucket", "--dataset", str(ds), "--scores", str(scores), "--score-col",
            "p1", "--out-dir", str(tmp_path / "o"), "--json"]  # fmt: skip
    assert runner.invoke(app, args).exit_code == 0
    assert json.loads(runner.invoke(app, args).stdout)["skipped_unchanged"] is True
    forced = json.loads(runner.invoke(app, [*args, "--force"]).stdout)
    assert forced["skipped_unchanged"] is False


def test_bad_input_exits_2_with_the_fix(tmp_path):
    ds, scores, logs = _inputs(tmp_path)
    empty = write_dataset(tmp_path / "empty.parquet", [])
    (tmp_path / "d.csv").write_text("uid,verdict,reason\ntrain_1,ok,\n", encoding="utf-8")
    cases = [
        # an empty bucket: exit 0 with empty outputs read as a review that found nothing
        (["curate", "verify-gt", "--dataset", str(empty), "--decisions", str(tmp_path / "d.csv"),
          "--out-dir", str(tmp_path / "v")], "holds no prompts"),
        (["curate", "bucket", "--dataset", str(ds), "--out-dir", str(tmp_path)], "give one score source"),
        (["curate", "bucket", "--dataset", str(tmp_path / "none.parquet"), "--scores", str(scores),
          "--score-col", "p1", "--out-dir", str(tmp_path)], "not found"),
        (["curate", "bucket", "--dataset", str(ds), "--scores", str(scores), "--score-col", "nope",
          "--out-dir", str(tmp_path)], "pass the score column with --score-col"),
        (["curate", "focus", "--prev", str(ds), "--logs", str(logs), "--run", "typo", "--out",
          str(tmp_path / "x.parquet")], "known runs: cur"),
        # --metric / --agg aggregate rollouts: with --scores they were accepted and ignored
        (["curate", "bucket", "--dataset", str(ds), "--scores", str(scores), "--score-col", "p1",
          "--metric", "judge", "--out-dir", str(tmp_path)], "--metric aggregates a run's rollouts"),
        (["curate", "bucket", "--dataset", str(ds), "--scores", str(scores), "--score-col", "p1",
          "--agg", "max", "--out-dir", str(tmp_path)], "--agg aggregates a run's rollouts"),
        # a threshold of the other round (before: accepted and ignored, exit 0)
        (["curate", "focus", "--prev", str(ds), "--logs", str(logs), "--run", "cur",
          "--hard-max", "0.5", "--out", str(tmp_path / "x.parquet")], "--hard-max applies to round 1"),
        (["curate", "focus", "--bucket-a", str(ds), "--bucket-0", str(ds), "--logs", str(logs),
          "--run", "cur", "--score-max", "0.5", "--out", str(tmp_path / "x.parquet")],
         "--score-max applies to round N+1"),
        (["curate", "verify-gt", "--dataset", str(ds), "--out-dir", str(tmp_path)], "--corpus"),
        (["curate", "verify-gt", "--dataset", str(ds), "--corpus", str(ds), "--verifier", "nope",
          "--out-dir", str(tmp_path)], "no backend named 'nope'"),
        # thresholds of the candidate rules: without --run, or a rule that reads them, they were
        # accepted and ignored
        (["curate", "verify-gt", "--dataset", str(ds), "--corpus", str(ds), "--ndcg-min", "0.9",
          "--out-dir", str(tmp_path)], "--ndcg-min is a threshold of the candidate rules"),
        (["curate", "verify-gt", "--dataset", str(ds), "--corpus", str(ds), "--logs", str(logs),
          "--run", "cur", "--select", "zero-score", "--low-score-max", "0.5",
          "--out-dir", str(tmp_path)], "--low-score-max is a threshold of the low-score rule"),
        (["curate", "plan", "--logs", str(logs), "--run", "cur", "--target", "0"], "--target"),
        (["lineage", str(tmp_path / "missing.parquet")], "not found"),
        # a file ddai did not write (before: a one-row funnel of the file itself, exit 0)
        (["lineage", str(ds)], "no manifest (<file>.manifest.json)"),
        (["lineage", str(ds), "--check", "--json"], "did not write it"),
    ]  # fmt: skip
    for args, message in cases:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert message in " ".join(r.output.split()), (args, r.output)


def test_every_command_has_help():
    for cmd in (["curate"], ["curate", "bucket"], ["curate", "verify-gt"], ["curate", "focus"],
                ["curate", "plan"], ["lineage"]):  # fmt: skip
        r = runner.invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0 and "Usage" in r.output


@pytest.mark.parametrize(
    ("flags", "shown"), [([], True), (["--no-progress"], False), (["--json"], False)]
)
def test_verify_gt_progress_flag_reaches_its_config(flags, shown, tmp_path, monkeypatch):
    from ddai.pipelines.funnel import verify_gt

    seen = []

    def fake(cfg):
        seen.append(cfg)
        raise ValueError("stopped after reading the config")

    monkeypatch.setattr(verify_gt, "run_verify", fake)
    args = ["curate", "verify-gt", "--dataset", str(tmp_path / "d.parquet")]
    res = runner.invoke(app, [*args, "--out-dir", str(tmp_path), "--corpus", str(tmp_path), *flags])
    assert res.exit_code == 2 and "stopped after reading the config" in res.output
    assert [c.progress for c in seen] == [shown]


def test_lineage_stops_at_a_run_reingested_since_the_output_was_built(tmp_path):
    """An output built from run ``cur`` before ``cur`` was re-ingested from another file: the run's
    current source is not what the output was built from, so lineage marks the partition as an
    earlier version (without --check: the digest comes from the manifests) and walks no further.
    """
    ds, scores, logs = _inputs(tmp_path)
    out = tmp_path / "out"
    _bucket_then_focus(ds, scores, logs, out)
    raw = tmp_path / "head.jsonl"  # the run replaced by a 1-row file
    rows = group("train_2", "reward", [1.0], judge_score=1.0)
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    src = {"path": str(raw), "sha256": io.sha256_file(raw), "format": "ddai"}
    store.write_run(logs, "cur", rows, sources=[src], manifest={"rows_in": 1})

    r = runner.invoke(app, ["lineage", str(out / "r1.parquet")])
    assert r.exit_code == 0, r.output
    assert "head.jsonl" not in r.stdout and "cur.raw.jsonl" not in r.stdout
    assert "run_id=cur (earlier version)" in r.stdout
    assert "re-ingested since" in r.stdout and "log partitions re-ingested since use  1" in r.stdout

    graph = json.loads(runner.invoke(app, ["lineage", str(out / "r1.parquet"), "--json"]).stdout)
    check("lineage", graph)
    [old] = [n for n in graph["nodes"] if n["kind"] == "log"]
    assert (
        old["run_id"] == "cur" and old["rows"] is None and old["path"] == str(logs / "run_id=cur")
    )
    assert "earlier version of run cur" in old["replaced"]
    assert not [n for n in graph["nodes"] if n["kind"] == "source"]
    [edge] = [e for e in graph["edges"] if e["source"] == old["id"]]
    assert edge["changed"] is True and edge["target"] == str(out / "r1.parquet")
    # the run as it is now is traced to its current source, unmarked
    now = json.loads(runner.invoke(app, ["lineage", str(logs / "run_id=cur"), "--json"]).stdout)
    assert [n["name"] for n in now["nodes"] if n["kind"] == "source"] == ["head.jsonl"]
    assert all(n["replaced"] is None for n in now["nodes"])


def test_verify_gt_refuses_an_unusable_verifier_before_reading_anything(tmp_path, monkeypatch):
    # before: the dataset was read and the preflight run before the verifier was built, so a
    # missing dataset was reported instead (and with a dataset, the work was done for nothing)
    toml = tmp_path / "ddai.toml"
    toml.write_text(
        '[backends.unpriced]\nkind = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[backends.keyless]\nkind = "openai"\nmodel = "m"\napi_key_env = "DDAI_TEST_UNSET_KEY"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DDAI_CONFIG", str(toml))
    monkeypatch.delenv("DDAI_TEST_UNSET_KEY", raising=False)
    missing = tmp_path / "missing.parquet"
    base = ["curate", "verify-gt", "--dataset", str(missing), "--corpus", str(missing)]
    base += ["--out-dir", str(tmp_path / "o")]
    cases = [
        (["--verifier", "unpriced", "--max-cost", "1"], "--max-cost 1 USD cannot cap backend"),
        (["--verifier", "unpriced", "--max-cost", "1", "--dry-run"], "cannot cap backend"),
        (["--verifier", "keyless"], "reads its key from $DDAI_TEST_UNSET_KEY"),
    ]
    for extra, message in cases:
        r = runner.invoke(app, [*base, *extra])
        assert r.exit_code == 2, (extra, r.output)
        said = " ".join(r.output.split())
        assert message in said and "missing.parquet" not in said, (extra, r.output)
    # a dry run calls nothing: a missing key is not a reason to refuse it (the file is)
    r = runner.invoke(app, [*base, "--verifier", "keyless", "--dry-run"])
    assert r.exit_code == 2 and "missing.parquet" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "o").exists()


def test_lineage_from_another_folder_finds_a_source_ingested_by_a_relative_path(
    tmp_path, monkeypatch
):
    """``ddai ingest logs/r0.jsonl`` run in one folder records the source's absolute path (as
    typed, symlinks kept), so ``ddai lineage`` run in another folder walks to that file, not to
    a missing one nor to a file of the same relative name there."""
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2", "train_3"])
    scores = tmp_path / "s.csv"
    pl.DataFrame({"id": ["train_1", "train_2", "train_3"], "p1": [0.9, 0.5, 0.0]}).write_csv(scores)
    here, there = tmp_path / "a", tmp_path / "b"
    text = "".join(
        json.dumps(r) + "\n"
        for r in group("train_2", "reward", [0.1, 0.2], judge_score=1.0)
        + group("train_3", "reward", [0.0, 0.0], judge_score=0.0)
    )
    for d in (here, there):  # the same relative name in both folders: only one was ingested
        (d / "logs").mkdir(parents=True)
        (d / "logs" / "r0.jsonl").write_text(text, encoding="utf-8")
    logs, out = tmp_path / "store", tmp_path / "out"
    monkeypatch.chdir(here)
    r = runner.invoke(app, ["ingest", "logs/r0.jsonl", "--logs", str(logs), "--run-id", "cur"])
    assert r.exit_code == 0, r.output
    [src] = store.run_manifest(logs, "cur")["sources"]
    assert src["path"] == str(here / "logs" / "r0.jsonl")
    _bucket_then_focus(ds, scores, logs, out)

    monkeypatch.chdir(there)
    r = runner.invoke(app, ["lineage", str(out / "r1.parquet"), "--json"])
    assert r.exit_code == 0, r.output
    [raw] = [n for n in json.loads(r.stdout)["nodes"] if n["name"] == "r0.jsonl"]
    assert (raw["kind"], raw["path"]) == ("source", str(here / "logs" / "r0.jsonl"))


def test_plan_out_file_and_json_name_buckets_as_the_rows_do(tmp_path):
    """Without --bucket the buckets are named ``bucket B/A/0``: ``recommend`` is keyed by those
    names in --json as in the --out file (the rows' ``bucket``), so one reads the other."""
    logs = tmp_path / "logs"
    write_log(
        logs,
        "r",
        group("train_1", "ndcg", [1.0, 1.0], judge_score=1.0)
        + group("train_2", "ndcg", [0.5, 0.5], judge_score=0.0),
    )
    out = tmp_path / "plan.json"
    args = ["curate", "plan", "--logs", str(logs), "--run", "r", "--n-agent", "4",
            "--out", str(out), "--json"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    printed, written = json.loads(r.stdout), json.loads(out.read_text(encoding="utf-8"))
    assert printed == written
    assert set(printed["recommend"]) == {x["bucket"] for x in printed["rows"]} | {"all"}
    assert "bucket B" in printed["recommend"]
