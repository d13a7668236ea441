"""``ddai curate verify-gt``'s two-run workflow (docs/curate.md): a first run with ``--corpus``
writes the verifier's proposals to ``review.csv``, a person fills in ``verdict``, a second run
with ``--decisions <out>/review.csv --out-dir <out>`` applies it. The second run asks no verifier;
its sheet must keep the proposals the first one recorded (they were emptied)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence

import pytest
from cli_schemas import check
from support.funnel_data import ids_of, write_dataset
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.backends import VerifyRequest, VerifyResult
from ddai.pipelines.funnel.verify_gt import VerifyConfig, run_verify
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records import decisions as dec

PROPOSED = {  # deck → (verdict, reason); None: the call failed
    "1": ("ok", "the page prints answer 1"),
    "2": ("wrong", "=the page says 7"),  # a formula-looking reason: escaped in the sheet
    "3": ("uncertain", "unclear scan"),
    "4": (None, "timeout"),
    "5": ("ok", "matches"),
}


class DeckVerifier:
    """Proposes ``PROPOSED[deck]`` (the deck read back from the question)."""

    name = "deck"

    async def verify(self, reqs: Sequence[VerifyRequest]) -> list[VerifyResult]:
        out = []
        for r in reqs:
            verdict, reason = PROPOSED[r.question.split("deck ")[1].rstrip("?")]
            out.append(VerifyResult(verdict, reason) if verdict else VerifyResult(None, "", reason))
        return out


def _sheet(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _write(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _first_run(tmp_path, **kw):
    """A first run with the verifier (``kw``: more VerifyConfig fields): its dataset, out folder
    and result."""
    ids = [f"train_{d}" for d in PROPOSED]
    ds = write_dataset(tmp_path / "curriculum_bucket_0.parquet", ids)
    corpus = tmp_path / "pages.parquet"
    Corpus.from_records(
        [{"doc_id": d, "page": 2, "text": f"deck {d}: answer {d}"} for d in PROPOSED]
    ).save(corpus)
    out = tmp_path / "data"
    res = run_verify(
        VerifyConfig(dataset=ds, out=out, corpus=corpus, **kw), verifier=DeckVerifier()
    )
    return ds, out, res


@pytest.fixture
def first(tmp_path):
    """The first run's dataset, out folder and review sheet rows."""
    ds, out, _ = _first_run(tmp_path)
    return ds, out, _sheet(out / "review.csv")


def test_a_rerun_with_the_filled_in_sheet_keeps_the_proposals(first):
    ds, out, rows = first
    assert [r["proposed_verdict"] for r in rows] == ["ok", "wrong", "uncertain", "error", "ok"]
    by_uid = {r["uid"]: r for r in rows}
    by_uid["train_2"].update(verdict="wrong", reason="the slide says 7")
    by_uid["train_3"].update(verdict="ok", reason="checked by hand")
    _write(out / "review.csv", rows)  # the person hands the sheet back in place

    second = run_verify(VerifyConfig(dataset=ds, out=out, decisions=(out / "review.csv",)))
    assert second.summary["verifier calls"] == 0
    assert second.summary["proposals carried"] == 5
    assert ids_of(second.outputs["excluded"]) == ["train_2"]
    again = _sheet(out / "review.csv")
    assert [(r["uid"], r["proposed_verdict"], r["proposed_reason"]) for r in again] == [
        ("train_1", "ok", "the page prints answer 1"),
        ("train_2", "wrong", "'=the page says 7"),  # still escaped once, not twice
        ("train_3", "uncertain", "unclear scan"),
        ("train_4", "error", "timeout"),
        ("train_5", "ok", "matches"),
    ]
    assert [(r["verdict"], r["reason"], r["decided_by"]) for r in again] == [
        ("", "", ""),
        ("wrong", "the slide says 7", "person"),
        ("ok", "checked by hand", "person"),
        ("", "", ""),
        ("", "", ""),
    ]
    html = (out / "review.html").read_text(encoding="utf-8")
    assert "unclear scan" in html and "not asked" not in html

    # a third run (the command as docs/curate.md shows it) over the rewritten sheet keeps them
    args = ["curate", "verify-gt", "--dataset", str(ds), "--decisions", str(out / "review.csv")]
    res = CliRunner().invoke(app, [*args, "--out-dir", str(out), "--force", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    check("curate-verify-gt", summary)
    assert summary["proposals_carried"] == 5 and summary["proposals"] == {}
    assert _sheet(out / "review.csv") == again


def test_trust_verifier_on_a_rerun_is_refused_with_the_way_to_apply_the_proposals(tmp_path):
    with pytest.raises(ValueError, match="rerun with --trust-verifier --corpus and without"):
        VerifyConfig(
            dataset=tmp_path / "d.parquet",
            out=tmp_path,
            decisions=(tmp_path / "review.csv",),
            trust_verifier=True,
        )


def test_a_decisions_file_of_ddai_shape_carries_no_proposal(first, tmp_path):
    ds, out, rows = first
    rows[0]["verdict"] = "ok"
    _write(out / "review.csv", rows)
    plain = tmp_path / "gt_review.csv"
    plain.write_text("uid,verdict,reason\ntrain_2,wrong,x\n", encoding="utf-8")
    assert dec.read_proposals([plain]) == {}
    res = run_verify(VerifyConfig(dataset=ds, out=tmp_path / "o", decisions=(plain,)))
    assert "proposals carried" not in res.summary
    assert all(r["proposed_verdict"] == "" for r in _sheet(res.outputs["review.csv"]))
    # with the first sheet before it, the proposals come along and the later verdict wins
    both = run_verify(
        VerifyConfig(dataset=ds, out=tmp_path / "o2", decisions=(out / "review.csv", plain))
    )
    sheet = {r["uid"]: r for r in _sheet(both.outputs["review.csv"])}
    assert sheet["train_2"]["proposed_verdict"] == "wrong" and sheet["train_2"]["reason"] == "x"
    assert sheet["train_1"]["decided_by"] == "person" and both.summary["proposals carried"] == 5


def test_a_proposal_no_verifier_gives_names_file_and_line(tmp_path):
    bad = tmp_path / "review.csv"
    bad.write_text(
        "uid,verdict,proposed_verdict\ntrain_1,ok,ok\ntrain_2,,maybe\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match=r"review\.csv:3: proposed_verdict 'maybe' for train_2"):
        dec.read_proposals([bad])


def _trusted(tmp_path):
    """A first run under --trust-verifier: its sheet's verdicts are the verifier's."""
    ds, out, res = _first_run(tmp_path, trust_verifier=True)
    assert res.summary["decided by a person"] == 0
    assert ids_of(res.outputs["excluded"]) == ["train_2", "train_3"]
    return ds, out, _sheet(out / "review.csv")


def test_the_verifiers_verdicts_on_a_handed_back_sheet_stay_proposals(tmp_path):
    """A sheet row decided_by=verifier is the verifier's verdict, not a person's: the rerun with
    the sheet as --decisions reads it as a proposal (only --trust-verifier applies those), while a
    verdict the person changed, or marked decided_by=person, is the person's."""
    ds, out, rows = _trusted(tmp_path)
    assert [(r["verdict"], r["decided_by"]) for r in rows] == [
        ("ok", "verifier"),
        ("wrong", "verifier"),
        ("uncertain", "verifier"),
        ("", ""),
        ("ok", "verifier"),
    ]
    by_uid = {r["uid"]: r for r in rows}
    by_uid["train_1"].update(verdict="wrong", reason="the slide says 7")  # overruled, label left
    by_uid["train_2"].update(decided_by="person")  # confirmed
    _write(out / "review.csv", rows)

    decided = dec.read_decisions([out / "review.csv"])
    assert {u: (d.verdict, d.reason) for u, d in decided.items()} == {
        "train_1": ("wrong", "the slide says 7"),
        "train_2": ("wrong", "=the page says 7"),  # the sheet's escape removed on read
    }
    second = run_verify(VerifyConfig(dataset=ds, out=out, decisions=(out / "review.csv",)))
    assert second.summary["decided by a person"] == 2
    assert second.summary["proposals carried"] == 5
    assert ids_of(second.outputs["excluded"]) == ["train_1", "train_2"]
    again = _sheet(out / "review.csv")
    assert [(r["uid"], r["verdict"], r["decided_by"], r["proposed_verdict"]) for r in again] == [
        ("train_1", "wrong", "person", "ok"),
        ("train_2", "wrong", "person", "wrong"),
        ("train_3", "", "", "uncertain"),
        ("train_4", "", "", "error"),
        ("train_5", "", "", "ok"),
    ]


def test_a_sheet_handed_back_with_only_the_verifiers_verdicts_is_refused(tmp_path):
    ds, out, _rows = _trusted(tmp_path)
    with pytest.raises(ValueError, match="4 carry the verifier's verdict") as e:
        run_verify(VerifyConfig(dataset=ds, out=out, decisions=(out / "review.csv",)))
    assert "--trust-verifier" in str(e.value) and "none of its 5 rows has a verdict" in str(e.value)
