"""``ddai judge`` and ``ddai backends check`` through the Typer app, against the fake server."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest
from cli_schemas import check
from support.fakes import FakeModelServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store

runner = CliRunner()
KEY = "sk-cli-test-5e4d3c2b1a-never-write-me"


def rows() -> list[dict]:
    # 2 prompts x 3 rollouts; the third rollout of u1 has no answer (nothing to judge).
    answers = {
        ("u0", 0): "1,000",
        ("u0", 1): "1000",
        ("u0", 2): "900",
        ("u1", 0): "Paris",
        ("u1", 1): "paris.",
        ("u1", 2): None,
    }
    refs = {"u0": "1000", "u1": "Paris"}
    return [
        {
            "uid": uid,
            "rollout_idx": i,
            "question": f"question of {uid}",
            "reference_answer": refs[uid],
            "answer": answers[(uid, i)],
            "judge_score": 0.5,
            "extra": json.dumps({"source": "test"}),
        }
        for uid in ("u0", "u1")
        for i in range(3)
    ]


@pytest.fixture
def logs(tmp_path):
    path = tmp_path / "logs"
    store.write_run(path, "r1", rows())
    return path


@pytest.fixture
def configured(tmp_path, monkeypatch):
    """A ddai.toml naming a fake OpenAI judge, with its key in the environment."""
    with FakeModelServer() as srv:
        cfg = tmp_path / "ddai.toml"
        cfg.write_text(
            f"""
[backends.fake]
kind = "openai"
model = "fake-judge"
base_url = "{srv.openai_base_url}"
api_key_env = "DDAI_CLI_TEST_KEY"
concurrency = 4
timeout_s = 5
price_in_per_mtok = 1000.0
price_out_per_mtok = 1000.0

[backends.dead]
kind = "gemini"
model = "gemini-x"
base_url = "http://127.0.0.1:9"
timeout_s = 1

[roles]
judge = "fake"
""",
            encoding="utf-8",
        )
        monkeypatch.setenv("DDAI_CONFIG", str(cfg))
        monkeypatch.setenv("DDAI_CLI_TEST_KEY", KEY)
        yield srv


def test_judge_local_writes_a_new_run_with_scores_and_reasons(logs):
    res = runner.invoke(
        app, ["judge", "--logs", str(logs), "--run", "r1", "--judge", "local", "--json"]
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert s["written_run"] == "r1@local" and s["to_score"] == 5 and s["scored"] == 5
    # Normalized exact match: 1,000 = 1000 (1), 1000 (1), 900 (0), Paris (1), paris. (1) → mean 0.8
    assert s["mean_judge_score"] == pytest.approx(0.8)
    t = store.read_rollouts(logs, ["r1@local"]).sort_by(
        [("uid", "ascending"), ("rollout_idx", "ascending")]
    )
    # the row with no answer is not this judge's: null, not the old 0.5 of another judge
    assert t.column("judge_score").to_pylist() == [1.0, 1.0, 0.0, 1.0, 1.0, None]
    assert s["not_scored_by_this_judge_null"] == 1
    extra = json.loads(t.column("extra")[0].as_py())
    assert (
        extra["prev_judge_score"] == 0.5
        and extra["judge_backend"] == "local"
        and extra["source"] == "test"
    )
    skipped = json.loads(t.column("extra")[5].as_py())
    assert skipped["judge_skipped"] == "no answer" and skipped["prev_judge_score"] == 0.5
    assert "judge_reason" not in skipped
    # the source run is untouched
    assert pc.sum(store.read_rollouts(logs, ["r1"]).column("judge_score")).as_py() == pytest.approx(
        3.0
    )


def test_judge_cache_with_a_backend_that_keeps_none_says_it_has_no_effect(
    logs, configured, tmp_path
):
    # --cache with the local judge was accepted and silently unused (the local judge caches
    # nothing): the summary now says so, on a dry run too; a caching judge gets no such note
    cache = str(tmp_path / "mine.sqlite")
    base = ["judge", "--logs", str(logs), "--run", "r1", "--cache", cache]
    note = "the local judge is not cached: --cache has no effect"
    for extra in (["--dry-run"], []):
        res = runner.invoke(app, [*base, "--judge", "local", "--out-run", "loc", "--json", *extra])
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)
        check("judge", s)  # docs/schemas/judge.json
        assert s["cache_note"] == note
    res = runner.invoke(app, [*base, "--judge", "local", "--out-run", "loc2"])
    assert res.exit_code == 0 and note in " ".join(res.output.split())
    assert not (tmp_path / "mine.sqlite").exists()
    res = runner.invoke(app, [*base, "--json"])  # the configured remote judge, which caches
    assert res.exit_code == 0, res.output
    assert "cache_note" not in json.loads(res.output) and (tmp_path / "mine.sqlite").is_file()


def test_judge_dry_run_counts_and_writes_nothing(logs, configured):
    res = runner.invoke(app, ["judge", "--logs", str(logs), "--run", "r1", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert (s["judge"], s["to_call"], s["cached"]) == ("fake", 5, 0)
    assert s["est_cost_usd"] > 0
    assert configured.requests == 0
    assert store.list_runs(logs) == ["r1"]


def test_judge_remote_then_rerun_is_free_and_key_stays_out_of_files(logs, configured, tmp_path):
    res = runner.invoke(app, ["judge", "--logs", str(logs), "--run", "r1", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["scored"] == 5
    assert configured.requests == 5 and KEY in configured.credentials
    res = runner.invoke(
        app, ["judge", "--logs", str(logs), "--run", "r1", "--out-run", "again", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert configured.requests == 5  # all five answered by the cache
    assert json.loads(res.output)["usage"]["ddai judge"]["cache_hits"] == 5
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p
    assert KEY not in res.output


def test_judge_max_cost_stops_then_resumes(logs, configured):
    dry = json.loads(
        runner.invoke(
            app, ["judge", "--logs", str(logs), "--run", "r1", "--dry-run", "--json"]
        ).output
    )
    per_call = dry["est_cost_usd"] / dry["to_call"]
    # Room for two calls at their estimate; the rest must wait for a rerun.
    cap = 2.5 * per_call
    res = runner.invoke(
        app, ["judge", "--logs", str(logs), "--run", "r1", "--max-cost", f"{cap:.6f}", "--json"]
    )
    assert res.exit_code == 1, res.output
    s = json.loads(res.output)
    assert (
        s["status"].startswith("stopped") and 0 < s["scored"] < 5 and s["left"] == 5 - s["scored"]
    )
    paid = configured.requests
    assert paid == s["scored"]
    assert store.list_runs(logs) == ["r1"]
    res = runner.invoke(app, ["judge", "--logs", str(logs), "--run", "r1", "--json"])
    assert res.exit_code == 0, res.output
    assert configured.requests == 5  # only the rest was paid for


def test_judge_dry_run_counts_exactly_the_calls_the_run_pays_for(logs, configured):
    """Cache hits, in-batch repeats and paid calls are counted apart, the same way in the dry run
    and in the run; the dry run's to_call equals the requests the fake server then receives."""
    assert runner.invoke(app, ["judge", "--logs", str(logs), "--run", "r1"]).exit_code == 0
    assert configured.requests == 5  # r1's five distinct triples are now cached
    answers = {"u0": ["1,000", "1,000", "1000", "42", "42", "42"], "u1": ["Paris", "Rome", "Rome"]}
    refs = {"u0": "1000", "u1": "Paris"}
    big = [
        {
            "uid": uid,
            "rollout_idx": i,
            "question": f"question of {uid}",
            "reference_answer": refs[uid],
            "answer": a,
            "judge_score": None,
            "extra": "{}",
        }
        for uid, alist in answers.items()
        for i, a in enumerate(alist)
    ]
    store.write_run(logs, "big", big)
    args = ["judge", "--logs", str(logs), "--run", "big", "--json"]
    dry = json.loads(runner.invoke(app, [*args, "--dry-run"]).output)
    # 9 items: 1,000 x2, 1000, Paris cached (4); 42 x3 and Rome x2 make 2 calls and 3 repeats.
    assert (dry["items"], dry["cached"], dry["duplicates"], dry["to_call"]) == (9, 4, 3, 2)
    assert dry["est_cost_usd"] > 0 and configured.requests == 5
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert configured.requests - 5 == dry["to_call"]  # the server's own counter
    used = json.loads(res.output)["usage"]["ddai judge"]
    assert (used["items"], used["cache_hits"], used["deduplicated"], used["calls"]) == (9, 4, 3, 2)


def test_judge_bad_input_exits_2(logs):
    res = runner.invoke(app, ["judge", "--logs", str(logs), "--run", "nope", "--judge", "local"])
    assert res.exit_code == 2 and "nope" in res.output
    res = runner.invoke(app, ["judge", "--logs", str(logs), "--run", "r1", "--judge", "missing"])
    assert res.exit_code == 2 and "no backend named 'missing'" in res.output


def test_backends_check_pings_and_reports(configured, tmp_path):
    res = runner.invoke(app, ["backends", "check", "--json"])
    assert res.exit_code == 1, res.output  # the `dead` backend is unreachable
    s = json.loads(res.output)
    assert s["roles"]["judge"] == "fake" and s["unreachable"] == ["dead"]
    by_name = {d["name"]: d for d in s["details"] if d["name"] != "local"}
    assert by_name["fake"]["ping"]["ok"] and by_name["fake"]["api_key_set"] is True
    assert not by_name["dead"]["ping"]["ok"]
    assert KEY not in res.output
    res = runner.invoke(app, ["backends", "check", "--no-ping"])
    assert res.exit_code == 0, res.output
    assert "fake" in res.output and "cache entries" in res.output


def test_judge_in_place_keeps_the_old_score_in_extra(logs):
    res = runner.invoke(
        app,
        ["judge", "--logs", str(logs), "--run", "r1", "--judge", "local", "--in-place", "--json"],
    )
    assert res.exit_code == 0, res.output
    assert store.list_runs(logs) == ["r1"]
    t = store.read_rollouts(logs, ["r1"]).sort_by(
        [("uid", "ascending"), ("rollout_idx", "ascending")]
    )
    assert t.column("judge_score").to_pylist() == [1.0, 1.0, 0.0, 1.0, 1.0, 0.5]
    assert {json.loads(e)["prev_judge_score"] for e in t.column("extra").to_pylist()[:5]} == {0.5}
    # in place loses nothing, but the one row the judge skipped keeps another judge's score:
    # marked on the row, counted in the summary and the manifest
    kept = json.loads(t.column("extra")[5].as_py())
    assert kept["judge_kept_previous"] is True and kept["judge_skipped"] == "no answer"
    s = json.loads(res.output)
    assert s["kept_previous_judge_score"] == 1 and "mixes two judges" in s["note"]
    rows_info = store.run_manifest(logs, "r1")["judge_rows"]
    assert rows_info == {"scored": 5, "skipped": 1, "failed": 0, "kept_previous": 1}
    res = runner.invoke(
        app, ["judge", "--logs", str(logs), "--run", "r1", "--in-place", "--out-run", "x"]
    )
    assert res.exit_code == 2 and "exclude each other" in res.output


@pytest.mark.parametrize(
    ("answers", "refs", "counts"),
    [
        (["", "  ", None], ["1000"] * 3, "1 have no answer, 2 an empty one"),
        (["1000", "900", "Paris"], [None] * 3, "3 no reference answer"),
    ],
)
@pytest.mark.parametrize("extra", [[], ["--in-place"], ["--dry-run"]])
def test_judge_of_a_run_with_nothing_to_judge_exits_2_and_writes_nothing(
    tmp_path, answers, refs, counts, extra
):
    # Before: `ddai judge` wrote run `blank@local` (a copy, or every score 0), exit 0.
    logs = tmp_path / "logs"
    table = [
        {"uid": "u0", "rollout_idx": i, "answer": a, "reference_answer": r, "judge_score": 0.5}
        for i, (a, r) in enumerate(zip(answers, refs, strict=True))
    ]
    store.write_run(logs, "blank", table)
    before = store.run_manifest(logs, "blank")
    res = runner.invoke(
        app, ["judge", "--logs", str(logs), "--run", "blank", "--judge", "local", *extra]
    )
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert "run 'blank' has no answer to judge" in said and counts in said
    assert store.list_runs(logs) == ["blank"]
    assert store.run_manifest(logs, "blank") == before


def test_judge_into_an_existing_other_run_is_refused(logs):
    # Before: `--out-run other` silently replaced run `other` with r1's rescored rollouts.
    store.write_run(logs, "other", [{"uid": "z", "rollout_idx": 0, "answer": "a"}])
    before = store.run_manifest(logs, "other")
    for out_run, fix in (("other", "pick another --out-run"), ("r1", "use --in-place")):
        res = runner.invoke(
            app,
            ["judge", "--logs", str(logs), "--run", "r1", "--judge", "local", "--out-run", out_run],
        )
        assert res.exit_code == 2, res.output
        said = " ".join(res.output.split())
        assert f"--out-run '{out_run}' is an existing run" in said and fix in said
    assert store.run_manifest(logs, "other") == before
    # a rerun into the judge's own earlier output is allowed
    args = ["judge", "--logs", str(logs), "--run", "r1", "--judge", "local", "--out-run", "mine"]
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, args).exit_code == 0


def test_a_new_outcome_replaces_the_markers_of_an_earlier_one():
    from ddai.pipelines.backends import JudgeResult
    from ddai.pipelines.backends.rejudge import _new_scores

    stale = json.dumps({"judge_error": "http-429: quota", "judge_kept_previous": True, "k": 1})
    rows = [
        {"judge_score": 0.5, "extra": stale, "answer": "a", "reference_answer": "a"},
        {"judge_score": 0.5, "extra": stale, "answer": "b", "reference_answer": "a"},
    ]
    results = [JudgeResult(1.0, "same"), JudgeResult(None, "", error="timeout")]
    # --retry-failed in place: row 0 is scored now, row 1 fails again and keeps 0.5
    scores, extras, counts = _new_scores(rows, [0, 1], results, "j", in_place=True)
    assert scores == [1.0, 0.5]
    assert json.loads(extras[0]) == {
        "k": 1,
        "prev_judge_score": 0.5,
        "judge_reason": "same",
        "judge_backend": "j",
    }
    assert json.loads(extras[1]) == {"k": 1, "judge_error": "timeout", "judge_kept_previous": True}
    assert counts == {"scored": 1, "skipped": 0, "failed": 1, "kept_previous": 1}
