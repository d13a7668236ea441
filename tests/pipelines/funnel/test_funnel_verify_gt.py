"""``curate verify-gt``: candidate rules, the review sheet, and who may exclude a prompt."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence

import pyarrow.parquet as pq
import pytest
from support.funnel_data import group, ids_of, write_dataset, write_log

from ddai.pipelines.backends import VerifyRequest, VerifyResult
from ddai.pipelines.funnel.verify_gt import (
    VerifyConfig,
    match_rules,
    run_verify,
    select_candidates,
)
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.store import manifest


class ScriptedVerifier:
    """Answers by document id (the ``N`` of ``train_N``, read back from the question)."""

    name = "scripted"

    def __init__(self, answers: dict[str, tuple[str | None, str]]):
        self.answers = answers
        self.seen: list[VerifyRequest] = []

    async def verify(self, reqs: Sequence[VerifyRequest]) -> list[VerifyResult]:
        self.seen.extend(reqs)
        out = []
        for r in reqs:
            doc = r.question.split("deck ")[1].rstrip("?")
            verdict, reason = self.answers.get(doc, ("ok", "page supports it"))
            if verdict is None:
                out.append(VerifyResult(None, "", error="timeout"))
            else:
                out.append(VerifyResult(verdict, reason))
        return out


def _corpus(path, docs):
    Corpus.from_records(
        [
            {"doc_id": d, "page": p, "text": f"deck {d} page {p}: answer {d}"}
            for d in docs
            for p in (1, 2)
        ]
    ).save(path)
    return path


def _read_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(
    ("score", "ndcg", "rules"),
    [
        (0.0, 0.5, ["zero-score"]),  # NDCG exactly 0.5 counts as "found"
        (0.0, 0.4999, ["low-ndcg"]),
        (0.3, 0.9, ["low-score"]),  # score exactly 0.3 is low
        (0.3000001, 0.9, []),
        (1e-12, 0.9, ["zero-score"]),  # float noise around 0 is 0
        (0.8, 0.1, ["low-ndcg"]),
    ],
)
def test_rules_at_their_boundaries(score, ndcg, rules):
    assert match_rules(score, ndcg) == rules


def test_select_candidates_filters_by_rule_and_reports_missing():
    ids = ["a", "b", "c", "d"]
    score = {"a": 0.0, "b": 0.2, "c": 0.9}
    ndcg = {"a": 0.9, "b": 0.9, "c": 0.1}
    cand, missing = select_candidates(ids, score, ndcg, rules=("zero-score", "low-ndcg"))
    assert cand == {"a": ["zero-score"], "c": ["low-ndcg"]}
    assert missing == ["d"]
    everyone, none_missing = select_candidates(ids, None, {}, rules=("all",))
    assert list(everyone) == ids and none_missing == []


@pytest.fixture
def bucket0(tmp_path):
    ids = ["train_1", "train_2", "train_3", "train_4", "train_5"]
    return write_dataset(tmp_path / "curriculum_bucket_0.parquet", ids), ids


@pytest.fixture
def corpus(tmp_path):
    """Every page ``bucket0``'s prompts name (their decks 1 to 5)."""
    return _corpus(tmp_path / "pages.parquet", ["1", "2", "3", "4", "5"])


def test_proposals_alone_exclude_nothing(tmp_path, bucket0):
    ds, ids = bucket0
    corpus = _corpus(tmp_path / "pages.parquet", ["1", "2", "3"])  # 4 and 5 missing
    v = ScriptedVerifier(
        {"2": ("wrong", "page says 7"), "3": ("uncertain", "unclear"), "4": (None, "")}
    )
    cfg = VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus, skip_preflight=True)
    res = run_verify(cfg, verifier=v)
    assert ids_of(res.outputs["filtered"]) == ids
    assert ids_of(res.outputs["excluded"]) == []
    assert res.summary["preflight"] == "skipped"
    assert res.summary["proposals"] == {"error": 1, "ok": 2, "uncertain": 1, "wrong": 1}
    assert res.summary["undecided candidates"] == 5
    assert res.summary["reference pages not in corpus"] == 2  # train_4 and train_5, page 2 each
    # The verifier read question, reference answer and reference page text.
    first = v.seen[0]
    assert first.reference == "answer 1" and first.page_text == "deck 1 page 2: answer 1"
    sheet = _read_csv(res.outputs["review.csv"])
    assert [r["uid"] for r in sheet] == ids
    assert sheet[1]["proposed_verdict"] == "wrong" and sheet[1]["verdict"] == ""
    assert sheet[3]["proposed_verdict"] == "error" and sheet[3]["proposed_reason"] == "timeout"
    html = res.outputs["review.html"].read_text(encoding="utf-8")
    assert "page says 7" in html and "deck 2 page 2: answer 2" in html


def test_person_decisions_exclude_and_win_over_proposals(tmp_path, bucket0, corpus):
    ds, _ = bucket0
    decisions = tmp_path / "review.csv"
    decisions.write_text(
        "uid,verdict,reason\ntrain_2,ok,verified by hand\ntrain_4,uncertain,blurry\n"
        "train_5,WRONG,answer is 12\ntrain_77,wrong,not in this set\n",
        encoding="utf-8",
    )
    v = ScriptedVerifier({"2": ("wrong", "proposal overruled"), "3": ("wrong", "ignored")})
    res = run_verify(
        VerifyConfig(
            dataset=ds,
            out=tmp_path / "o",
            corpus=corpus,
            verifier="scripted",
            decisions=(decisions,),
        ),
        verifier=v,
    )
    # Only undecided candidates are sent to the verifier.
    assert sorted(r.question.split("deck ")[1] for r in v.seen) == ["1?", "3?"]
    assert ids_of(res.outputs["filtered"]) == ["train_1", "train_2", "train_3"]
    excluded = pq.read_table(res.outputs["excluded"])
    assert excluded["id"].to_pylist() == ["train_4", "train_5"]
    extra = excluded["extra_info"].to_pylist()
    assert [(e["gt_verdict"], e["gt_reason"]) for e in extra] == [
        ("uncertain", "blurry"),
        ("wrong", "answer is 12"),
    ]
    assert extra[0]["question"].startswith("What is the value")  # the dataset's fields intact
    assert res.summary["excluded by verdict"] == {"uncertain": 1, "wrong": 1}
    assert res.summary["decisions for ids not in the dataset"] == 1
    m = manifest.read(res.outputs["filtered"])
    assert m["rows"]["dropped"] == {"excluded uncertain": 1, "excluded wrong": 1}
    assert m["params"]["verifier"] == {"name": "scripted"}


def test_trust_verifier_excludes_wrong_and_uncertain_but_not_failures(tmp_path, bucket0, corpus):
    ds, _ = bucket0
    v = ScriptedVerifier({"2": ("wrong", "w"), "3": ("uncertain", "u"), "4": (None, "")})
    res = run_verify(
        VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus, trust_verifier=True),
        verifier=v,
    )
    assert ids_of(res.outputs["excluded"]) == ["train_2", "train_3"]
    assert ids_of(res.outputs["filtered"]) == ["train_1", "train_4", "train_5"]
    sheet = {r["uid"]: r for r in _read_csv(res.outputs["review.csv"])}
    assert sheet["train_2"]["decided_by"] == "verifier"
    assert sheet["train_4"]["verdict"] == ""  # a failed call decides nothing


def test_review_sheet_round_trips_as_decisions(tmp_path, bucket0, corpus):
    ds, _ = bucket0
    v = ScriptedVerifier({"3": ("wrong", "proposal")})
    first = run_verify(VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus), verifier=v)
    # A reviewer fills in the verdict column of the sheet and hands it back.
    rows = _read_csv(first.outputs["review.csv"])
    for r in rows:
        r["verdict"] = "wrong" if r["proposed_verdict"] == "wrong" else "ok"
    sheet = tmp_path / "reviewed.csv"
    with open(sheet, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    second = run_verify(VerifyConfig(dataset=ds, out=tmp_path / "o2", decisions=(sheet,)))
    assert ids_of(second.outputs["excluded"]) == ["train_3"]
    assert second.summary["verifier calls"] == 0


def test_candidates_from_a_run(tmp_path):
    ids = ["train_1", "train_2", "train_3", "train_4"]
    ds = write_dataset(tmp_path / "r1.parquet", ids)
    rows = (
        group("train_1", "reward", [0.0, 0.0], ndcg=1.0)  # zero-score
        + group("train_2", "reward", [0.2, 0.4], ndcg=0.5)  # low-score (0.3 with float noise)
        + group("train_3", "reward", [1.0, 1.0], ndcg=0.2)  # low-ndcg
        # train_4 not in the run
    )
    logs = tmp_path / "logs"
    write_log(logs, "r1", rows)
    corpus = _corpus(tmp_path / "pages.parquet", ["1", "2", "3", "4"])
    v = ScriptedVerifier({})
    res = run_verify(
        VerifyConfig(
            dataset=ds,
            out=tmp_path / "o",
            logs=logs,
            runs=("r1",),
            select=("zero-score", "low-score"),
            corpus=corpus,
        ),
        verifier=v,
    )
    sheet = _read_csv(res.outputs["review.csv"])
    assert [(r["uid"], r["rules"]) for r in sheet] == [
        ("train_1", "zero-score"),
        ("train_2", "low-score"),
    ]
    assert float(sheet[1]["score"]) == pytest.approx(0.3)
    assert res.summary["not in run"] == 1


def test_a_run_that_scores_none_of_the_dataset_is_an_error(tmp_path):
    # no candidate because no score read as clean ground truth (exit 0, an empty review)
    ds = write_dataset(tmp_path / "b0.parquet", ["train_1", "train_2"])
    logs = tmp_path / "logs"
    write_log(logs, "r1", group("train_9", "reward", [0.0], ndcg=1.0))
    out = tmp_path / "o"
    corpus = _corpus(tmp_path / "pages.parquet", ["1", "2"])
    cfg = VerifyConfig(dataset=ds, out=out, logs=logs, runs=("r1",), corpus=corpus)
    with pytest.raises(ValueError) as e:
        run_verify(cfg, verifier=ScriptedVerifier({}))
    msg = str(e.value)
    assert msg.startswith(f"no prompt of {ds} has a score in the rollouts of run(s) r1: its 2 ids")
    assert "(e.g. train_9)" in msg and msg.endswith("the person's review is applied as it is).")
    assert not out.exists()


def test_dry_run_counts_calls_and_writes_nothing(tmp_path, bucket0, monkeypatch, corpus):
    ds, _ = bucket0
    toml = tmp_path / "ddai.toml"
    toml.write_text(
        '[backends.pricey]\nkind = "openai"\nmodel = "m"\nprice_in_per_mtok = 1.0\n'
        "price_out_per_mtok = 2.0\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("DDAI_CONFIG", str(toml))
    res = run_verify(
        VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus, verifier="pricey", dry_run=True)
    )
    assert res.summary["verifier calls"] == 5
    # 5 calls: at least 200 template tokens in and 40 out each at $1 / $2 per million tokens.
    assert res.summary["estimated cost (USD)"] >= 5 * (200 * 1.0 + 40 * 2.0) / 1e6
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"select": ("zero-score",)}, "read a run's scores"),
        ({"select": ("bogus",), "runs": ("r",), "logs": "l"}, "unknown --select"),
        ({"decisions": ("d.csv",), "trust_verifier": True}, "choose one"),
        ({}, "--corpus"),
        ({"decisions": ("d.csv",), "verifier": "local"}, "--corpus"),
    ],
)
def test_config_errors(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        VerifyConfig(dataset=tmp_path / "d.parquet", out=tmp_path, **kw)


def test_bad_verdict_in_decisions_names_file_and_line(tmp_path, bucket0):
    ds, _ = bucket0
    bad = tmp_path / "d.csv"
    bad.write_text("uid,verdict,reason\ntrain_1,ok,\ntrain_2,maybe,hmm\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"d\.csv:3: verdict 'maybe'"):
        run_verify(VerifyConfig(dataset=ds, out=tmp_path / "o", decisions=(bad,)))


@pytest.mark.parametrize(
    ("sheet", "message"),
    [
        # a review of another prompt set: before, exit 0 with 0 excluded (its uids only counted)
        (
            "uid,verdict,reason\nother_1,wrong,x\nother_2,ok,\n",
            r"none of its 2 decided uids \(e\.g\. other_1, other_2\) is an id of --dataset",
        ),
        # the review sheet as written, not filled in: before, exit 0 with nothing decided
        ("uid,verdict,reason\ntrain_1,,\ntrain_2,,\n", r"none of its 2 rows has a verdict"),
    ],
)
def test_decisions_that_decide_nothing_here_are_refused(tmp_path, bucket0, sheet, message):
    ds, _ = bucket0
    decisions = tmp_path / "d.csv"
    decisions.write_text(sheet, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        run_verify(VerifyConfig(dataset=ds, out=tmp_path / "o", decisions=(decisions,)))
    assert not (tmp_path / "o").exists()


def test_manifest_records_backend_usage_and_skips_rerun(tmp_path, bucket0):
    ds, _ = bucket0
    decisions = tmp_path / "d.csv"
    decisions.write_text("uid,verdict,reason\ntrain_1,wrong,x\n", encoding="utf-8")
    cfg = VerifyConfig(dataset=ds, out=tmp_path / "o", decisions=(decisions,))
    first = run_verify(cfg)
    m = manifest.read(first.outputs["excluded"])
    assert m["rows"] == {"in": 5, "out": 1, "dropped": {"kept": 4}}
    assert json.loads(json.dumps(m["backend_calls"])) == {}
    assert run_verify(cfg).skipped


def test_failed_verifier_calls_exit_1_are_cached_and_retried_only_when_asked(
    tmp_path, bucket0, monkeypatch, corpus
):
    from typer.testing import CliRunner

    from ddai.cli.app import app

    ds, _ = bucket0
    toml = tmp_path / "ddai.toml"
    toml.write_text(  # nothing listens on port 9: every call fails with a connection error
        '[backends.down]\nkind = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "DDAI_VGT_KEY"\nmax_retries = 0\ntimeout_s = 2\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DDAI_CONFIG", str(toml))
    monkeypatch.setenv("DDAI_VGT_KEY", "k")
    args = ["curate", "verify-gt", "--dataset", str(ds), "--corpus", str(corpus)]
    args += ["--out-dir", str(tmp_path / "o"), "--verifier", "down", "--json"]
    runner = CliRunner()
    for extra, skipped in (([], False), ([], True), (["--retry-failed"], False)):
        res = runner.invoke(app, [*args, *extra])
        assert res.exit_code == 1, res.output
        s = json.loads(res.output[: res.output.rindex("}") + 1])
        assert s["failed_calls"] == {"connection": 5} and s["skipped_unchanged"] is skipped
        assert s["proposals"] == {"error": 5} and s["excluded"] == 0
    m = manifest.read(tmp_path / "o" / "curriculum_bucket_0_filtered.parquet")
    site = next(iter(m["backend_calls"].values()))
    assert site["calls"] == 5 and site["cached_failures"] == 0  # the --retry-failed run called


def test_preflight_refuses_candidates_whose_pages_the_corpus_lacks(tmp_path, bucket0):
    ds, _ = bucket0
    corpus = _corpus(tmp_path / "pages.parquet", ["1", "2", "3"])  # 4 and 5 missing
    v = ScriptedVerifier({})
    with pytest.raises(ValueError) as err:
        run_verify(VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus), verifier=v)
    msg = str(err.value)
    assert "2 of 5 prompts have golden pages missing" in msg
    assert "4_2" in msg and "5_2" in msg and "--skip-preflight" in msg
    assert v.seen == []  # nothing was asked, nothing written
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_preflight_passes_and_is_recorded(tmp_path, bucket0, corpus):
    ds, _ = bucket0
    res = run_verify(
        VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus), verifier=ScriptedVerifier({})
    )
    assert res.summary["preflight"] == "passed"
    dry = run_verify(
        VerifyConfig(dataset=ds, out=tmp_path / "d", corpus=corpus, dry_run=True),
        verifier=ScriptedVerifier({}),
    )
    assert dry.summary["preflight"] == "passed"


@pytest.mark.parametrize("progress", [True, False])
def test_the_progress_setting_reaches_the_verifier_backend(
    tmp_path, bucket0, monkeypatch, progress, corpus
):
    from ddai.pipelines import backends

    ds, _ = bucket0
    seen = []

    def fake_backend(role, name=None, **ctx):
        seen.append((role, ctx["progress"]))
        return ScriptedVerifier({})

    monkeypatch.setattr(backends, "get_backend", fake_backend)
    cfg = VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus, progress=progress)
    run_verify(cfg)
    assert seen == [("verifier", progress)]
