"""The explorer as a debugging tool, driven by Playwright in the system Chromium.

Over the synthetic world (``--size small``) with page images drawn from its corpus, 22 one-row
runs (a run list longer than any native select shows), a run ``flash`` of six lines of DDAI's
flash log (a format without steps) and a run ``train`` that the test appends training steps to
while the live page is open: keyboard navigation on the table and transcripts, previous / next
rollout in the filter, the ``<bbox>`` drawn where it points on its page, zoom, the raw-text
toggle, placeholders for pages without an image, the searchable run list and filter chips, the
SQL box's URL and transcript links, and the live tail. With ``DDAI_SCREENSHOTS=DIR``
it saves ``serve-transcript-raw.png`` and ``serve-live.png`` into DIR.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from conftest import SHARED
from playwright_browser import browser, new_page, wait_for
from report_world import planted_rows
from serve_world import served, world_store

from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.records import schema, tags
from ddai.pipelines.store import query
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.turns import turn_views

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RUNS = [f"many_{i:02d}" for i in range(22)]
# two prompts' groups of four: a training step's rollouts
TRAIN_SQL = (
    "SELECT * FROM rollouts WHERE run_id = 'focused_r1' AND rollout_idx < 4 "
    "ORDER BY uid, rollout_idx LIMIT 8"
)


def _train_rows(con, step: int) -> list[dict[str, Any]]:
    rows = con.sql(TRAIN_SQL).to_arrow_table().to_pylist()
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k in schema.ROLLOUT_SCHEMA.names}
        reward = (r["reward"] or 0.0) + 0.1 * step  # a reward that rises with the step
        out.append({**r, "run_id": "train", "step": step, "reward": reward})
    return out


def _append_step(logs: Path, rows: list[dict[str, Any]], step: int) -> None:
    """Commit one training step's rows as training's RolloutLog does (append, step in the
    manifest record)."""
    store.write_run(logs, "train", rows, append=True, manifest={"step": step})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("serve-debug")
    world, logs = world_store(root, "small")
    for run in RUNS:
        store.write_run(logs, run, planted_rows()["base"][:1])
    # a run ingested from six lines of DDAI's flash log: a format that never records a step
    head = root / "round0_flash_rm_detail.jsonl"
    with open(SHARED / "ddai-data" / "reconstructed" / head.name, encoding="utf-8") as fh:
        head.write_text("".join(next(fh) for _ in range(6)), encoding="utf-8")
    ingest(IngestConfig([head], logs, run_id="flash", progress=False))
    con = query.connect(logs)
    _append_step(logs, _train_rows(con, 1), 1)
    step2 = _train_rows(con, 2)
    # a bbox turn whose page was shown before it, and a rollout with an invalid turn
    boxed = invalid = None
    for row in (
        con.sql("SELECT * FROM rollouts WHERE run_id = 'phase1' ORDER BY uid, rollout_idx")
        .to_arrow_table()
        .to_pylist()
    ):
        views, why = turn_views(row)
        if boxed is None and any(v["bbox"] for v in views):
            boxed = (row, next(v for v in views if v["bbox"]))
        if invalid is None and why is None and any(v["action"] == "invalid" for v in views):
            invalid = row
    con.close()
    assert boxed and invalid
    return {
        "logs": logs,
        "corpus": world / "pages.parquet",
        "boxed": boxed,
        "invalid": invalid,
        "step2": step2,
    }


def _href(row: dict[str, Any]) -> str:
    step = "" if row["step"] is None else row["step"]
    return "/rollout?" + urlencode(
        {"run": row["run_id"], "uid": row["uid"], "step": step, "idx": row["rollout_idx"]}
    )


def _shot(page: Any, name: str) -> None:
    folder = os.environ.get("DDAI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def _key(url: str) -> tuple[str, str, str, str]:
    q = parse_qs(urlparse(url).query, keep_blank_values=True)
    return q["run"][0], q["uid"][0], q["step"][0], q["idx"][0]


def test_debugging_walk_in_chromium(world):
    app = create_app(ServeConfig(logs=world["logs"], corpus=world["corpus"]))
    with served(app) as base, browser() as b:
        page = new_page(b, viewport={"width": 1400, "height": 900})
        page.set_default_timeout(20_000)

        # 1. the table: question first and on screen at 1400 px; a run list of 27 runs searched
        page.goto(f"{base}/?run=phase1&sort=reward&dir=desc")
        head = page.locator("#rollouts thead th").first
        assert head.inner_text() == "question"
        box = head.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1400
        assert page.locator("#run-picker .run-option").count() == len(RUNS) + 7
        page.locator("#run-picker summary").click()
        page.fill("#run-search", "many_1")
        assert page.locator("#run-picker .run-option:visible").count() == 10  # many_10 … many_19
        chips = page.locator("#chips a.chip:not(.clear)").all_inner_texts()
        assert [c.replace("✕", "").strip() for c in chips] == ["run: phase1"]

        # 2. keyboard on the table: j j k selects rows, Enter opens the selected one
        links = page.eval_on_selector_all(
            "#rollouts tbody tr", "rows => rows.map(r => r.dataset.href)"
        )
        page.locator("body").click(position={"x": 5, "y": 5})
        for key in ("j", "j", "k", "j"):
            page.keyboard.press(key)
        selected = page.eval_on_selector_all(
            "#rollouts tbody tr", "rows => rows.map(r => r.classList.contains('selected'))"
        )
        assert selected.index(True) == 1 and selected.count(True) == 1
        page.keyboard.press("?")
        assert page.locator("#keys-help").is_visible()
        page.keyboard.press("Escape")
        assert not page.locator("#keys-help").is_visible()
        page.keyboard.press("Enter")
        page.wait_for_url("**/rollout?**")
        assert _key(page.url) == _key(base + links[1])
        assert parse_qs(urlparse(page.url).query)["f"] == ["run=phase1&sort=reward&dir=desc"]

        # 3. n / p walk the filter's order: the table's next row, then back
        assert page.locator("#near").inner_text().startswith("← previous rollout · 2 of 144")
        page.keyboard.press("n")
        page.wait_for_url(lambda u: _key(u) == _key(base + links[2]))
        page.keyboard.press("p")
        page.wait_for_url(lambda u: _key(u) == _key(base + links[1]))
        page.keyboard.press("p")
        page.wait_for_url(lambda u: _key(u) == _key(base + links[0]))
        assert page.locator("#near .off").first.inner_text() == "first rollout"
        # j / k move between turns on a transcript
        page.keyboard.press("j")
        page.keyboard.press("j")
        assert page.eval_on_selector("ol.turns", "ol => ol.querySelector('.selected').id") == (
            "turn-1"
        )

        # 4. the <bbox> drawn where it points on its page; a click zooms the page
        row, turn = world["boxed"]
        page.goto(base + _href(row))
        fig = page.locator("figure.boxed").first
        fig.locator(".bbox-box").wait_for(state="visible")
        geo = fig.evaluate(
            "f => { const i = f.querySelector('img'), b = f.querySelector('.bbox-box');"
            " const r = i.getBoundingClientRect(), q = b.getBoundingClientRect();"
            " return {w: i.naturalWidth, h: i.naturalHeight, iw: r.width, ih: r.height,"
            " x: q.left - r.left, y: q.top - r.top, bw: q.width, bh: q.height}; }"
        )
        x1, y1, x2, y2 = turn["bbox"]
        sx, sy = geo["iw"] / geo["w"], geo["ih"] / geo["h"]
        assert geo["x"] == pytest.approx(x1 * sx, abs=1.5)
        assert geo["y"] == pytest.approx(y1 * sy, abs=1.5)
        assert geo["bw"] == pytest.approx((min(x2, geo["w"]) - x1) * sx, abs=1.5)
        assert geo["bh"] == pytest.approx((min(y2, geo["h"]) - y1) * sy, abs=1.5)
        assert fig.locator("figcaption").inner_text().startswith(turn["crop_of"])
        fig.locator("img").click()
        assert page.locator("#zoom").is_visible()
        assert page.locator("#zoom-img").get_attribute("src").endswith(f"/img/{turn['crop_of']}")
        page.locator("#zoom").click()
        assert not page.locator("#zoom").is_visible()

        # 5. raw text: the invalid turn shows what the model wrote; the toggle shows every turn's
        inv = world["invalid"]
        raws = [t.raw for t in tags.parse_turns(inv["response"])]
        page.goto(base + _href(inv))
        bad = next(i for i, t in enumerate(inv["turns"]) if t["action"] == "invalid")
        shown = page.locator(f"#turn-{bad} pre.raw")
        assert shown.is_visible() and shown.inner_text() == raws[bad].strip()
        good = next(i for i, t in enumerate(inv["turns"]) if t["action"] != "invalid")
        assert not page.locator(f"#turn-{good} pre.raw").is_visible()
        page.locator("#raw-toggle").check()
        assert page.locator(f"#turn-{good} pre.raw").is_visible()
        assert page.locator(f"#turn-{good} pre.raw").inner_text() == raws[good].strip()
        _shot(page, "serve-transcript-raw")
        page.keyboard.press("r")  # r turns it off again
        assert not page.locator(f"#turn-{good} pre.raw").is_visible()

        # 6. pages the server has no image of are placeholders saying so, not grey bars
        page.goto(f"{base}/rollout?run=planted&uid=u4&step=1&idx=0")
        page.locator(".img-missing").first.wait_for()
        assert page.locator("img.page-img").count() == 0
        assert "no image of page 4_2" in page.locator(".img-missing").first.inner_text()

        # 7. the SQL box: the query in the URL runs on opening; a row links to its transcript
        sql = "SELECT run_id, uid, step, rollout_idx FROM explorer WHERE run_id = 'phase1' ORDER BY uid, rollout_idx LIMIT 3"
        page.goto(f"{base}/sql?" + urlencode({"q": sql}))
        page.locator("#sql-result a.rollout-link").first.wait_for()
        assert page.locator("#sql-result a.rollout-link").count() == 3
        page.fill("#sql", sql.replace("LIMIT 3", "LIMIT 2"))
        page.click("#sql-run")
        wait_for(page, "document.querySelectorAll('#sql-result a.rollout-link').length === 2")
        assert parse_qs(urlparse(page.url).query)["q"] == [sql.replace("LIMIT 3", "LIMIT 2")]
        page.locator("#sql-result a.rollout-link").first.click()
        page.wait_for_url("**/rollout?**")
        assert page.locator("h1").inner_text().startswith("phase1")

        # 8. live tail: a step committed while the page is open shows without a reload
        page.goto(f"{base}/live?run=train")
        wait_for(page, "document.getElementById('live-last-step').textContent === '1'")
        page.evaluate("window.__sameDocument = 42")
        _append_step(world["logs"], world["step2"], 2)
        wait_for(page, "document.getElementById('live-last-step').textContent === '2'")
        assert page.evaluate("window.__sameDocument") == 42  # the same document: no reload
        assert page.locator("#live-steps").inner_text() == "2 steps"
        assert page.locator("#live-rollouts").inner_text() == "16 rollouts"
        assert page.evaluate("document.getElementById('live-chart').data[0].x") == [1, 2]
        assert page.locator("#live-groups tbody tr td").first.inner_text() == "2"
        _shot(page, "serve-live")
        # a flash run can never have a step: the page says its format records none
        page.goto(f"{base}/live?run=flash")
        wait_for(page, "document.getElementById('live-rollouts').textContent === '6 rollouts'")
        assert page.locator("#live-chart").inner_text() == (
            "This run's log format (flash) records no training steps: there is no curve over "
            "steps to draw."
        )

        # no script error anywhere (the planted pages' image 404s are the only failed loads)
        errors = [e for e in page.errors if "Failed to load resource" not in e]
        assert errors == []
