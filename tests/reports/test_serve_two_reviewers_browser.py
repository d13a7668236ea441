"""Two researchers at once in Playwright: two explorers (``--annotator kim``, ``--annotator
lee``) over one store, one review sheet and one decisions file, a browser page each.

Both pages open on the first undecided prompt; kim decides it, lee's stale page is refused
instead of silently replacing kim's verdict, and after a reload lee overturns it (the last
decision is the one kept, once). Both label the same prompt with notes full of CSV trouble
(quotes, commas, a newline, a leading ``=``). A restarted explorer shows every decision and
label; the decisions file moves ``analyze attribution --flags`` as the decisions say.
"""

from __future__ import annotations

import csv

import pytest
from playwright_browser import browser, new_page, wait_for
from report_world import planted_store
from serve_world import served

from ddai.pipelines.analyses.attribution import attribute
from ddai.pipelines.analyses.configs import AttributionConfig
from ddai.pipelines.funnel import review
from ddai.pipelines.records.decisions import read_decisions
from ddai.pipelines.store import query
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NOTES = {"kim": '=1+1, said "two"\nthen left', "lee": "+cmd, 'quoted', \"x\""}


def _sheet(path, uids):
    rows = [
        review.ReviewRow(
            uid=u, verdict="", reason="", decided_by="", proposed_verdict="uncertain",
            proposed_reason="", rules="all", score=None, ndcg=None, question="", reference="",
            pages="",
        )
        for u in uids
    ]  # fmt: skip
    path.write_text(review.sheet_csv(rows), encoding="utf-8")
    return path


def _label(page, url: str, note: str) -> None:
    page.goto(f"{url}/annotate?run=base&uid=u3")
    page.check('input[name="label"][value="wrong ground truth"]')
    page.fill('textarea[name="note"]', note)
    with page.expect_navigation():
        page.click("#annotate-save")


def test_two_reviewers_at_once_keep_every_decision_and_label(tmp_path):
    logs = planted_store(tmp_path)
    sheet = _sheet(tmp_path / "review.csv", ["u1", "u2", "u3"])
    decisions = tmp_path / "review_decisions.csv"

    def cfg(who: str) -> ServeConfig:
        return ServeConfig(logs, annotate=True, annotator=who, review=sheet)

    with (
        served(create_app(cfg("kim"))) as kim_url,
        served(create_app(cfg("lee"))) as lee_url,
        browser() as b,
    ):
        kim, lee = new_page(b), new_page(b)
        kim.goto(f"{kim_url}/review")
        lee.goto(f"{lee_url}/review")
        assert kim.inner_text("#review-uid") == lee.inner_text("#review-uid") == "u1"
        kim.fill('#review-form input[name="reason"]', NOTES["kim"].replace("\n", " "))
        with kim.expect_navigation():
            kim.click('#review-form button[data-verdict="wrong"]')
        assert kim.inner_text("#review-uid") == "u2"
        # lee's page still shows u1 undecided: the key is refused, nothing replaced
        lee.keyboard.press("o")
        assert wait_for(lee, "() => document.getElementById('review-status').textContent")
        status = lee.inner_text("#review-status")
        assert "kim decided u1 wrong" in status and "reload" in status
        assert lee.inner_text("#review-uid") == "u1"
        lee.reload()
        assert "decided wrong by kim" in lee.inner_text("#review-decision")
        assert "1 of 3 decided" in lee.inner_text("#review-progress")
        with lee.expect_navigation():
            lee.keyboard.press("u")  # lee overturns it, having seen it
        assert lee.inner_text("#review-uid") == "u2"
        with kim.expect_navigation():
            kim.keyboard.press("o")  # kim's u2 page is current: taken
        assert kim.inner_text("#review-uid") == "u3"
        lee.goto(f"{lee_url}/review?uid=u3")
        with lee.expect_navigation():
            lee.keyboard.press("w")
        # both label u3 of run base
        _label(kim, kim_url, NOTES["kim"])
        _label(lee, lee_url, NOTES["lee"])
        assert lee.locator("#annotations tbody tr").count() == 2
        # lee's u3 decision, made after kim's page loaded, is shown once kim's page reloads
        kim.goto(f"{kim_url}/review?uid=u3")
        assert "decided wrong by lee" in kim.inner_text("#review-decision")
        assert kim.errors == [] and lee.errors == [
            "console: Failed to load resource: the server responded with a status of 409 (Conflict)"
        ]

    with open(decisions, newline="", encoding="utf-8") as fh:
        rows = [(r["uid"], r["verdict"], r["annotator"]) for r in csv.DictReader(fh)]
    assert rows == [("u1", "uncertain", "lee"), ("u2", "ok", "kim"), ("u3", "wrong", "lee")]
    con = query.connect(logs)
    labels = con.sql("SELECT annotator, note FROM annotations ORDER BY annotator").fetchall()
    con.close()
    assert labels == [("kim", NOTES["kim"]), ("lee", NOTES["lee"])]

    # a restart keeps everything
    with served(create_app(cfg("kim"))) as url, browser() as b:
        page = new_page(b)
        page.goto(f"{url}/review")
        assert "3 of 3 decided" in page.inner_text("#review-progress")
        page.goto(f"{url}/annotate?run=base&uid=u3")
        notes = page.locator("#annotations tbody tr").all_inner_texts()
        assert len(notes) == 2 and any("kim" in n for n in notes)

    # the decisions file feeds attribution as it is: u3 (all zero, no golden page retrieved) is
    # a search failure until lee's "wrong" flags its ground truth; u1, overturned to uncertain,
    # flags too but is not low-scoring
    assert set(read_decisions([decisions])) == {"u1", "u2", "u3"}
    plain, _ = attribute(logs, ["base"], AttributionConfig())
    flagged, summary = attribute(logs, ["base"], AttributionConfig(flags=[decisions]))
    assert dict(plain.select("uid", "class").iter_rows())["u3"] == "search_failure"
    assert dict(flagged.select("uid", "class").iter_rows())["u3"] == "wrong_gt"
    assert summary["flags loaded"] == 2
