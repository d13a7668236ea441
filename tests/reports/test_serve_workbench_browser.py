"""The workbench in Playwright over the small synthetic world, pages drawn from its corpus.

From a group view, "compare with the best rollout" opens the diff: both rollouts turn by turn
with their pages and crops as images and the rows that differ marked; from there the rollout's
transcript, its "label" link, and a label on one of its turns saved through the form, listed on
the page, found by the ``annotations`` view, then retracted. A review sheet of three prompts shows
each prompt's reference pages as images and takes a key. With ``DDAI_SCREENSHOTS=DIR`` it saves
``serve-diff.png`` and ``serve-annotate.png``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright_browser import browser, new_page, wait_for
from serve_world import served, world_store

from ddai.pipelines.funnel import review
from ddai.pipelines.store import query
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# a group whose rewards differ and whose worse rollouts searched and cropped: a diff worth seeing
GROUP = """
SELECT run_id, uid, step
FROM rollouts
WHERE judge_score IS NOT NULL AND reward IS NOT NULL
GROUP BY run_id, uid, step
HAVING min(reward) < max(reward)
   AND bool_or(list_bool_or(list_transform(turns, lambda t: t.action = 'bbox')))
ORDER BY run_id, uid, step
LIMIT 1
"""
IMAGES_LOADED = (
    "(sel) => { const im = Array.from(document.querySelectorAll(sel));"
    " return im.length > 0 && im.every(i => i.complete && i.naturalWidth > 0); }"
)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("workbench")
    world, logs = world_store(root, "small")
    con = query.connect(logs)
    run, uid, step = con.sql(GROUP).fetchall()[0]
    prompts = con.sql(
        "SELECT uid, any_value(question), any_value(reference_answer), "
        "any_value(reference_pages) FROM rollouts WHERE run_id = ? GROUP BY uid ORDER BY uid "
        "LIMIT 3",
        params=[run],
    ).fetchall()
    con.close()
    sheet = root / "review.csv"
    rows = [
        review.ReviewRow(
            uid=u, verdict="", reason="", decided_by="", proposed_verdict="ok",
            proposed_reason="the page supports it", rules="all", score=None, ndcg=None,
            question=q, reference=str(a), pages="; ".join(pages or []),
        )
        for u, q, a, pages in prompts
    ]  # fmt: skip
    sheet.write_text(review.sheet_csv(rows), encoding="utf-8")
    return {"world": world, "logs": logs, "group": (run, uid, step), "sheet": sheet,
            "prompts": [p[0] for p in prompts]}  # fmt: skip


def _shot(page, name: str) -> None:
    if folder := os.environ.get("DDAI_SCREENSHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_diff_label_and_review_in_the_browser(world):
    run, uid, _step = world["group"]
    cfg = ServeConfig(
        world["logs"],
        corpus=world["world"] / "pages.parquet",
        annotate=True,
        annotator="ann",
        review=world["sheet"],
    )
    with served(create_app(cfg)) as url, browser() as b:
        page = new_page(b, viewport={"width": 1400, "height": 900})
        page.goto(f"{url}/group?uid={uid}&run={run}")
        links = page.locator("a.diff-link")
        assert links.count() == page.locator(".card").count() - 1  # all but the best
        links.first.click()
        page.wait_for_url("**/diff?**")
        assert page.locator("#diff tr.turn-row").count() >= 1
        assert page.locator("#diff tr.differs").count() >= 1  # the rewards differ at least
        assert wait_for(page, IMAGES_LOADED, "#diff img")
        a_reward, b_reward = (
            page.locator("#diff tr.score", has_text="reward").locator("td").all_inner_texts()
        )
        assert float(b_reward) >= float(a_reward)  # B is the group's best
        _shot(page, "serve-diff")
        # A's transcript, its label link, a label on its first turn
        page.locator("#diff thead th.a a").click()
        page.wait_for_url("**/rollout?**")
        page.locator("h1 a.annotate-link").click()
        page.wait_for_url("**/annotate?**")
        page.check('input[name="target"][value="turn"]')
        page.select_option('select[name="turn"]', "0")
        page.check('input[name="label"][value="search failure"]')
        page.fill('textarea[name="note"]', "searched the wrong deck first")
        with page.expect_navigation():
            page.click("#annotate-save")
        row = page.locator("#annotations tbody tr")
        assert row.count() == 1
        cells = row.first.locator("td").all_inner_texts()
        assert cells[0] == "turn" and cells[2] == "0" and cells[3] == "search failure"
        assert cells[5] == "ann"
        _shot(page, "serve-annotate")
        con = query.connect(world["logs"])
        got = con.sql(
            "SELECT run_id, uid, turn, label, note, annotator FROM annotations"
        ).fetchall()
        assert got == [(run, uid, 0, "search failure", "searched the wrong deck first", "ann")]
        with page.expect_navigation():
            page.click("button.retract")
        assert page.locator("#annotations-none").count() == 1
        # the review queue: reference pages as images, one key decides
        page.goto(f"{url}/review")
        assert page.inner_text("#review-uid") == world["prompts"][0]
        # the bare /review shows the first undecided prompt: the URL names it (a reload or a
        # shared link shows this prompt, not whichever is first undecided by then)
        assert page.evaluate("location.search") == f"?uid={world['prompts'][0]}"
        assert wait_for(page, IMAGES_LOADED, "#review .pages img")
        with page.expect_navigation():
            page.keyboard.press("u")
        assert page.inner_text("#review-uid") == world["prompts"][1]
        assert "1 of 3 decided" in page.inner_text("#review-progress")
        page.keyboard.press("p")  # back to the first: its decision shown
        page.wait_for_url(f"**/review?uid={world['prompts'][0]}")
        assert "decided uncertain by ann" in page.inner_text("#review-decision")
        # read in the page: Playwright's page.url is only updated when its client handles events
        assert page.evaluate("location.search") == f"?uid={world['prompts'][0]}"
        assert page.inner_text("#review-uid") == world["prompts"][0]
        assert page.errors == []
