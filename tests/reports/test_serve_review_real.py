"""DDAI's bucket 0 (637 prompts) reviewed in ``ddai serve --annotate --review`` with Playwright.

The review sheet comes from ``curate verify-gt`` over bucket 0 (every prompt a candidate; a
scripted verifier proposes ``uncertain`` for each, so any exclusion is the reviewer's). The
reviewer decides as DDAI's published review sheet (``gt_review_bucket0.csv``: 55 wrong, the rest
ok): the first ``BROWSER`` prompts in the browser by their keys (``w`` / ``o``, the page moving
on to the next undecided prompt), the rest through the same endpoint the page posts to, from the
page (637 page loads with their rollout tables take minutes on two shared cores). Then
``curate verify-gt --decisions`` keeps 582 and ``curate focus`` gives 854 for round 1, as
published; a POST without the page token is refused, and the same store served without
``--annotate`` refuses the decision. With ``DDAI_SCREENSHOTS=DIR`` the queue is saved as
``serve-review.png``.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import SHARED
from playwright_browser import browser, new_page
from serve_world import local, page_token, served
from support import ddai_funnel

from ddai.pipelines.backends import VerifyRequest, VerifyResult
from ddai.pipelines.funnel.focus import FocusConfig, run_focus
from ddai.pipelines.funnel.verify_gt import VerifyConfig, run_verify
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records.decisions import read_decisions
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app

pytestmark = [pytest.mark.slow, pytest.mark.browser]

BROWSER = 40  # prompts decided by key presses; the first wrong one is among them (checked)
KEY = {"ok": "o", "wrong": "w"}


class Uncertain:
    """A verifier proposing ``uncertain`` for every prompt (it reads no page here)."""

    name = "scripted-uncertain"

    async def verify(self, reqs: Sequence[VerifyRequest]) -> list[VerifyResult]:
        return [VerifyResult("uncertain", "no reference page text to check") for _ in reqs]


@pytest.fixture(scope="module")
def bucket0(tmp_path_factory):
    root = tmp_path_factory.mktemp("review-real")
    logs = ddai_funnel.ingest_rounds(SHARED, root / "logs")
    b = ddai_funnel.bucket(SHARED, root / "out")
    corpus = root / "pages.parquet"
    Corpus.from_records([{"doc_id": "none", "page": 1, "text": "no page"}]).save(corpus)
    sheet = run_verify(
        VerifyConfig(
            dataset=b.outputs["0"],
            out=root / "sheet",
            corpus=corpus,
            skip_preflight=True,
            progress=False,
        ),
        verifier=Uncertain(),
    )
    published = read_decisions([ddai_funnel.reconstructed(SHARED) / "gt_review_bucket0.csv"])
    return {
        "root": root,
        "logs": logs,
        "bucket": b,
        "review": sheet.outputs["review.csv"],
        "wrong": {u for u, d in published.items() if d.verdict == "wrong"},
    }


def _post_from_page(page, body: dict, *, token: bool = True) -> list:
    meta = "document.querySelector('meta[name=\"ddai-token\"]').content" if token else "''"
    return page.evaluate(
        f"""async (body) => {{
            const r = await fetch('/api/review', {{method: 'POST', headers: {{
                'Content-Type': 'application/json', 'X-DDAI-Token': {meta}}},
                body: JSON.stringify(body)}});
            return [r.status, await r.json()];
        }}""",
        body,
    )


def test_bucket0_decided_in_the_browser_reproduces_582_and_854(bucket0):
    root, wrong = bucket0["root"], bucket0["wrong"]
    with open(bucket0["review"], newline="") as fh:
        sheet = [r["uid"] for r in csv.DictReader(fh)]
    assert len(sheet) == 637 and len(wrong) == 55 and wrong <= set(sheet)
    first_wrong = min(sheet.index(u) for u in wrong)
    assert first_wrong + 1 < BROWSER, "the browser sample must decide a wrong one too"
    decisions = root / "decisions.csv"
    cfg = ServeConfig(
        bucket0["logs"],
        annotate=True,
        annotator="reviewer",
        review=bucket0["review"],
        decisions_out=decisions,
    )
    shots = os.environ.get("DDAI_SCREENSHOTS")
    with served(create_app(cfg)) as url, browser() as b:
        page = new_page(b, viewport={"width": 1300, "height": 1000})
        page.goto(f"{url}/review")
        assert "0 of 637 decided" in page.inner_text("#review-progress")
        assert page.inner_text("#review-proposal").startswith("uncertain")
        # a POST without the page token is refused, and decides nothing
        status, body = _post_from_page(page, {"uid": sheet[0], "verdict": "ok"}, token=False)
        assert status == 403 and "page token" in body["error"]
        assert page.errors == [
            "console: Failed to load resource: the server responded with a status of 403 "
            "(Forbidden)"
        ]
        page.errors.clear()
        for n in range(BROWSER):
            uid = page.inner_text("#review-uid")
            assert uid == sheet[n]  # the queue walks the sheet in order
            assert f"{n} of 637 decided" in page.inner_text("#review-progress")
            if n == first_wrong + 1:  # an ok prompt: round 1 trained on it, its rollouts shown
                assert page.locator("table.review-group tbody tr").count() > 0
                if shots:
                    page.screenshot(path=str(Path(shots) / "serve-review.png"))
            with page.expect_navigation():
                page.keyboard.press(KEY["wrong" if uid in wrong else "ok"])
        assert f"{BROWSER} of 637 decided" in page.inner_text("#review-progress")
        # the rest through the endpoint the page posts to
        for uid in sheet[BROWSER:]:
            status, body = _post_from_page(
                page, {"uid": uid, "verdict": "wrong" if uid in wrong else "ok"}
            )
            assert status == 200, body
        assert body["decided"] == 637 and body["next"] is None
        page.goto(f"{url}/review")
        assert "637 of 637 decided" in page.inner_text("#review-progress")
        assert page.locator("#review-done").count() == 1
        assert page.errors == []
    with open(decisions, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 637 and {r["annotator"] for r in rows} == {"reviewer"}
    assert all(r["decided_at"].endswith("Z") for r in rows)
    # verify-gt and focus read the file as it is
    b = bucket0["bucket"]
    v = run_verify(VerifyConfig(dataset=b.outputs["0"], out=root / "v", decisions=(decisions,)))
    assert v.summary["kept"] == 582
    assert v.summary["excluded by verdict"] == {"wrong": 55}
    r1 = run_focus(
        FocusConfig(
            out=root / "v" / "focused_round1.parquet",
            logs=bucket0["logs"],
            runs=("round0",),
            bucket_a=b.outputs["a"],
            bucket_0=v.outputs["filtered"],
            hard_max=0.2,
        )
    )
    assert (r1.summary["hard A"], r1.summary["bucket 0"], r1.summary["round 1"]) == (272, 582, 854)
    assert pq.read_table(r1.outputs["focus"]).num_rows == 854


def test_served_without_annotate_the_queue_refuses_decisions(bucket0):
    out = bucket0["root"] / "read-only.csv"
    cfg = ServeConfig(bucket0["logs"], review=bucket0["review"], decisions_out=out)
    client = local(create_app(cfg))
    page = client.get("/review").text
    assert "read-only: start ddai serve --annotate" in page and "disabled" in page
    r = client.post(
        "/api/review",
        content=json.dumps({"uid": "x", "verdict": "ok"}),
        headers={"Content-Type": "application/json", "X-DDAI-Token": page_token(client)},
    )
    assert r.status_code == 403 and "read-only" in r.json()["error"]
    assert not out.exists()
