"""``ddai serve`` in headless Chromium over the synthetic world at ``--size medium``.

One server, one browser, the issue's walk: filter to one class, sort by reward, open a prompt's
group with all its rollouts, open a transcript whose page images and crop render, follow a count
from a section to its rollouts, run a SQL query, and get a 400 for SQL that writes or reads a
file, and a 403 / 415 for a POST without the page token or a JSON type; a planted ``<script>``
stays text; nothing is requested outside the server. With
``DDAI_SCREENSHOTS=DIR`` the walk also saves screenshots of each page into DIR.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from chromium import Page, chromium, open_page
from report_world import XSS, XSS_ANSWER
from serve_world import served, world_store
from support.page_images import render_page_images

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.store import query
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CLASS = "same_doc_success"
BBOX_ROLLOUT = """
SELECT run_id, uid, step, rollout_idx, retrieved_pages
FROM rollouts
WHERE run_id = 'focused_r1' AND list_bool_or(list_transform(turns, lambda t: t.action = 'bbox'))
  AND len(list_filter(retrieved_pages, lambda p: list_contains(reference_pages, p))) > 0
ORDER BY uid, rollout_idx LIMIT 1
"""
ROWS = "Array.from(document.querySelectorAll('#rollouts tbody tr'))"
SQL = (
    "SELECT outcome, count(*) AS n FROM explorer WHERE run_id = 'phase1' GROUP BY ALL ORDER BY ALL"
)


def _post_sql(sql: str, content_type: str = "application/json", token: bool = True) -> str:
    """A fetch of /api/sql from the page: by default as the SQL form sends it (JSON and the page
    token of its <meta name="ddai-token">)."""
    body = json.dumps({"sql": sql})
    meta = "document.querySelector('meta[name=\"ddai-token\"]').content" if token else "''"
    return (
        f"fetch('/api/sql', {{method: 'POST', headers: {{'Content-Type': {json.dumps(content_type)},"
        f" 'X-DDAI-Token': {meta}}}, body: {json.dumps(body)}}})"
        ".then(async r => [r.status, (await r.json()).error || ''])"
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("serve-world")
    world, logs = world_store(root, "medium")
    con = query.connect(logs)
    run, uid, step, idx, pages = con.sql(BBOX_ROLLOUT).fetchall()[0]
    expected = {
        "bbox": {"run": run, "uid": uid, "step": step, "idx": idx, "pages": pages},
        "group_n": con.execute(
            "SELECT count(*) FROM rollouts WHERE run_id = ? AND uid = ?", [run, uid]
        ).fetchall()[0][0],
        "sql": con.sql(
            "SELECT CASE WHEN format_ok IS NOT DISTINCT FROM false THEN 'format_fail' "
            "WHEN judge_score IS NULL THEN 'unjudged' WHEN judge_score >= 1 THEN 'success' "
            "ELSE 'failure' END AS o, count(*) FROM rollouts WHERE run_id = 'phase1' "
            "GROUP BY ALL ORDER BY ALL"
        ).fetchall(),
        "rollouts": con.sql("SELECT count(*) FROM rollouts").fetchall()[0][0],
    }
    con.close()
    images = root / "img"
    corpus = Corpus.load(world / "pages.parquet")
    doc = pages[0].rsplit("_", 1)[0]
    render_page_images(corpus, images, pages=sorted(set(pages) | set(corpus.doc_pages(doc))))
    return {"logs": logs, "images": images, **expected}


async def _shot(page: Page, name: str) -> None:
    folder = os.environ.get("DDAI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        await page.screenshot(Path(folder) / f"{name}.png")


async def _walk(base: str, port: int, w: dict[str, Any]) -> dict[str, Any]:
    got: dict[str, Any] = {}
    async with open_page(port) as page:
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            width=1400,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        # 1. filter to one class through the form
        await page.goto(base + "/")
        got["all_total"] = await page.eval("document.getElementById('total').textContent")
        await page.eval(f"document.getElementById('f-tag').value = {json.dumps(CLASS)}")
        await page.click("#f-apply")
        got["filtered_url"] = await page.eval("location.search")
        got["filtered_tags"] = await page.eval(
            f"{ROWS}.map(r => Array.from(r.querySelectorAll('.tag')).map(t => t.textContent))"
        )
        got["filtered_total"] = await page.eval("document.getElementById('total').textContent")
        # 2. sort by reward (a click on the header: highest first)
        await page.click("a.sort[data-col='reward']")
        got["sorted_url"] = await page.eval("location.search")
        got["rewards"] = await page.eval(f"{ROWS}.map(r => r.querySelector('.reward').textContent)")
        await _shot(page, "serve-rollouts")
        # 3. the group view of the bbox rollout's prompt: every rollout of it in its run
        b = w["bbox"]
        await page.goto(f"{base}/group?uid={b['uid']}&run={b['run']}")
        got["cards"] = await page.eval("document.querySelectorAll('.card').length")
        got["card_rewards"] = await page.eval(
            "Array.from(document.querySelectorAll('.card .reward')).map(e => e.textContent)"
        )
        await _shot(page, "serve-group")
        # 4. its transcript, opened from the group: pages and the crop render
        await page.click(f".card a.rollout-link[href$='&idx={b['idx']}'][href*='step={b['step']}']")
        got["transcript_url"] = await page.eval("location.search")
        got["images"] = await page.wait_for(
            "(() => { const im = Array.from(document.querySelectorAll('img'));"
            " return im.length && im.every(i => i.complete) &&"
            " im.map(i => [i.className, i.naturalWidth, i.closest('figure').className]); })()"
        )
        await _shot(page, "serve-transcript")
        # 5. a count in a section leads to its rollouts
        await page.goto(base + "/sections")
        await page.wait_for("document.querySelector('#outcome-chart svg.main-svg') !== null")
        got["section_count"] = await page.eval(
            "document.querySelector('#classes a.count').textContent"
        )
        got["section_href"] = await page.eval(
            "document.querySelector('#classes a.count').getAttribute('href')"
        )
        await _shot(page, "serve-sections")
        await page.click("#classes a.count")
        got["section_total"] = await page.eval("document.getElementById('total').textContent")
        # ... and so do a judge-vs-NDCG cell and a score band (the last cell of each table)
        for name, sel in (("cell", "#judge-ndcg a.count"), ("band", "#bands a.count")):
            await page.goto(base + "/sections")
            if name == "cell":
                await page.eval("document.getElementById('judge-ndcg').scrollIntoView()")
                await _shot(page, "serve-grid")
            got[f"{name}_count"], got[f"{name}_href"] = await page.eval(
                f"(() => {{ const a = Array.from(document.querySelectorAll({json.dumps(sel)}))"
                ".pop(); return [a.textContent, a.getAttribute('href')]; })()"
            )
            await page.click(f"a.count[href={json.dumps(got[f'{name}_href'])}]")
            got[f"{name}_total"] = await page.eval("document.getElementById('total').textContent")
        # 6. the SQL box: a query through the form, then statements that write or read files
        await page.goto(base + "/sql")
        await page.eval(f"document.getElementById('sql').value = {json.dumps(SQL)}")
        await page.eval("document.getElementById('sql-run').click()")
        got["sql_rows"] = await page.wait_for(
            "Array.from(document.querySelectorAll('#sql-result tbody tr')).map("
            "r => Array.from(r.cells).map(c => c.textContent))"
        )
        await _shot(page, "serve-sql")
        got["sql_denied"] = {
            s: await page.eval(_post_sql(s), await_promise=True)
            for s in (
                "COPY (SELECT * FROM rollouts) TO '/tmp/ddai-leak.csv'",
                "CREATE TABLE t AS SELECT 1",
                "SELECT * FROM read_csv('/etc/passwd')",
                "SELECT * FROM read_text('/etc/hostname')",
            )
        }
        # ... and the guard refuses a POST without the page token or without a JSON type
        got["sql_guarded"] = [
            await page.eval(_post_sql("SELECT 1", token=False), await_promise=True),
            await page.eval(_post_sql("SELECT 1", content_type="text/plain"), await_promise=True),
        ]
        # 7. the planted script stays text
        await page.goto(f"{base}/rollout?run=planted&uid=u4&step=1&idx=0")
        got["planted"] = await page.eval(
            "({think: Array.from(document.querySelectorAll('.think')).map(t => t.textContent),"
            " answer: document.querySelector('.answer').textContent,"
            " scripts: document.scripts.length,"
            " images: Array.from(document.images).map(i => new URL(i.src).pathname),"
            " missing: document.querySelectorAll('.img-missing').length})"
        )
        await asyncio.sleep(0.2)
        got.update(requests=page.requests, responses=page.responses)
        got.update(dialogs=page.dialogs, errors=page.errors)
    return got


def test_explorer_walk_in_chromium(world, tmp_path):
    app = create_app(ServeConfig(logs=world["logs"], image_root=world["images"]))
    with served(app) as base, chromium(tmp_path / "profile") as port:
        got = asyncio.run(asyncio.wait_for(_walk(base, port, world), 300))

    # the whole store is in the table (medium world + 16 planted rollouts)
    assert got["all_total"] == f"{world['rollouts']:,}"
    # 1. class filter: every row carries the class, the URL says so
    assert "tag=same_doc_success" in got["filtered_url"]
    assert got["filtered_tags"] and all(CLASS in tags for tags in got["filtered_tags"])
    # 2. sorted by reward, highest first, the filter kept
    assert "sort=reward" in got["sorted_url"] and "dir=desc" in got["sorted_url"]
    assert "tag=same_doc_success" in got["sorted_url"]
    rewards = [float(r) for r in got["rewards"] if r != "—"]
    assert rewards == sorted(rewards, reverse=True) and len(rewards) > 1
    # 3. the group shows every rollout of the prompt in its run
    assert got["cards"] == world["group_n"] == len(got["card_rewards"]) > 1
    # 4. the transcript's page images and crop rendered; the golden page is marked
    b = world["bbox"]
    assert f"idx={b['idx']}" in got["transcript_url"]
    kinds = {cls for cls, _, _ in got["images"]}
    assert kinds == {"page-img", "crop-img"}
    assert all(width > 0 for _, width, _ in got["images"])
    assert any("golden" in fig for _, _, fig in got["images"])
    # 5. the section's count is the number of rollouts its link opens
    assert got["section_total"] == got["section_count"]
    assert "tag=" in got["section_href"]
    assert got["cell_total"] == got["cell_count"] and "ndcg_band=" in got["cell_href"]
    assert "judge_level=" in got["cell_href"]
    # a band's last link is its rollouts count (the prompts count links the same rollouts)
    assert got["band_total"] == got["band_count"] and "score_band=" in got["band_href"]
    # 6. SQL: the form's result equals the store's counts; writes and file reads get a 400
    assert [(o, int(n)) for o, n in got["sql_rows"]] == world["sql"]
    assert {s: status for s, (status, _) in got["sql_denied"].items()} == dict.fromkeys(
        got["sql_denied"], 400
    )
    assert not Path("/tmp/ddai-leak.csv").exists()
    assert [status for status, _ in got["sql_guarded"]] == [403, 415]
    # 7. the planted markup is text: shown as written, never run, no element made from it
    planted = got["planted"]
    assert any(XSS in t for t in planted["think"])
    assert planted["answer"] == XSS_ANSWER
    assert planted["scripts"] == 1  # explorer.js only
    # its pages have no image on this server: each <img> asks /img/ and, once answered 404,
    # becomes a placeholder (how many have turned by now is a race, so count both)
    assert planted["images"] or planted["missing"]
    assert all(p.startswith("/img/") for p in planted["images"])
    assert got["dialogs"] == [] and got["errors"] == []
    # only the server itself was asked for anything, and it answered every page
    assert {u.split("/")[2] for u in got["requests"]} == {base.split("/")[2]}
    # (the planted run's pages have no images: their 404s are expected)
    assert all(
        s < 400 for u, s in got["responses"].items() if not ("/api/sql" in u or "/img/" in u)
    )
