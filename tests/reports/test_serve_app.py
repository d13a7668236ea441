"""The explorer's routes through Starlette's test client over the planted store."""

from __future__ import annotations

import io
from html import unescape
from urllib.parse import parse_qs, urlencode, urlparse

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from PIL import Image
from report_world import XSS, XSS_ANSWER, planted_rows, planted_store
from serve_world import local, post_sql
from support.turns import turn_row

from ddai.pipelines import store
from ddai.pipelines.pages.corpus import Corpus
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.explorer import Explorer

TOKEN = "t" * 24


def _turn(idx: int, action: str, arg: str, retrieved: list[str] | None) -> dict:
    blank = dict.fromkeys(("observation", "error", "value"))
    return turn_row(idx, action, arg, forced=False, retrieved=retrieved, **blank)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    logs = planted_store(tmp_path_factory.mktemp("planted"))
    # a rollout whose turns say which page each search showed: 4_1, then 4_2, then a crop
    row = dict(planted_rows()["base"][12], uid="u4", answer="a")
    row["turns"] = [
        _turn(0, "search", "q a", ["4_1"]),
        _turn(1, "search", "q b", ["4_2"]),
        _turn(2, "bbox", "[1, 2, 30, 40]", None),
        _turn(3, "search_complete", "true", None),
    ]
    row["retrieved_pages"] = ["4_1", "4_2"]
    store.write_run(logs, "pages", [row])
    return logs


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("img")
    Image.new("RGB", (200, 100), "white").save(root / "4_2.png")
    return root


@pytest.fixture(scope="module")
def client(logs, images):
    return local(create_app(ServeConfig(logs=logs, image_root=images)))


def test_rollout_table_pages_sorts_and_links(client):
    res = client.get("/?tag=same_doc_success&sort=reward&dir=desc")
    assert res.status_code == 200
    assert "Content-Security-Policy" in res.headers
    assert "script-src 'self'" in res.headers["Content-Security-Policy"]
    html = res.text
    assert '<span id="total">2</span>' in html
    # a transcript link carries the view it was opened from (f=), for previous / next
    f = urlencode({"f": "tag=same_doc_success&sort=reward&dir=desc"})
    assert f'href="/rollout?run=base&uid=u1&step=1&idx=1&amp;{f}"'.replace("&amp;", "&") in (
        html.replace("&amp;", "&")
    )
    assert 'href="/group?uid=u3&run=new"' in html
    # export links keep the filter and the sort
    link = html.split('id="export-csv" href="')[1].split('"')[0].replace("&amp;", "&")
    assert parse_qs(urlparse(link).query) == {
        "tag": ["same_doc_success"],
        "sort": ["reward"],
        "dir": ["desc"],
    }


def test_api_pages_are_json(client):
    res = client.get("/api/rollouts?run=base&sort=reward&dir=desc&size=3&page=2")
    data = res.json()
    assert (data["total"], data["page"], data["size"]) == (16, 2, 3)
    assert [(r["uid"], r["rollout_idx"]) for r in data["rows"]] == [("u2", 1), ("u4", 0), ("u4", 1)]
    assert client.get("/api/rollouts?total=0").json()["total"] is None


def test_bad_parameters_are_400_with_the_reason(client):
    res = client.get("/api/rollouts?judge_min=high")
    assert res.status_code == 400 and "judge_min='high' is not a number" in res.json()["error"]
    res = client.get("/?sort=nope")
    assert res.status_code == 400 and "sort=&#39;nope&#39;" in res.text
    assert client.get("/rollout?run=base").status_code == 400
    assert client.get("/rollout?run=base&uid=u1&step=1&idx=9").status_code == 404
    assert client.get("/group").status_code == 400
    assert client.get("/group?uid=zzz").status_code == 404
    assert client.get("/export.xlsx").status_code == 404


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/img/4_2?bbox=0,0,inf,inf", "bbox="),  # was a 500 (int(inf) while cropping)
        ("/img/4_2?bbox=nan,0,5,5", "bbox="),
        ("/?page=1e20", "page="),
        ("/api/rollouts?page=100000000000000000000", "page must be <="),  # was a 500
        ("/export.csv?page=100000000000000000000", "page must be <="),
        ("/?judge_min=nan", "judge_min="),  # was a 200 matching nothing
        ("/api/rollouts?step_max=1e999", "step_max="),
        ("/api/rollouts?judge_level=inf", "judge_level="),
        ("/api/rollouts?size=-5", "size must be >= 1"),
        ("/api/rollouts?size=1e3", "size="),
        ("/api/rollouts?total=yes", "total="),  # was read as "count them"
        ("/rollout?run=base&uid=u1&idx=99999999999999999999999", "idx must be <="),  # was a 404
        ("/rollout?run=base&uid=u1&idx=-1", "idx must be >= 0"),
        ("/rollout?run=base&uid=u1&idx=1.5", "idx="),
        ("/rollout?run=base&uid=u1&step=nan&idx=0", "step="),
        ("/rollout?run=base&uid=u1&step=-99999999999999999999999&idx=0", "step must be >= 0"),
    ],
)
def test_every_parameter_that_does_not_parse_is_a_400_naming_it(client, path, named):
    res = client.get(path)
    assert res.status_code == 400, (path, res.status_code)
    text = res.json()["error"] if path.startswith("/api/") else unescape(res.text)
    assert named in text


def test_planted_markup_stays_text_everywhere(client):
    page = client.get("/rollout?run=base&uid=u4&step=1&idx=0").text
    assert XSS not in page and XSS_ANSWER not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in page
    group = client.get("/group?uid=u4").text
    assert XSS_ANSWER not in group and "&lt;img src=x onerror=" in group
    # the SQL box returns the text as data; the page renders it with textContent
    res = post_sql(
        client,
        json={
            "sql": "SELECT answer FROM rollouts WHERE uid = 'u4' AND rollout_idx = 0 AND run_id = 'base'"
        },
    )
    assert res.json()["rows"] == [[XSS_ANSWER]]


def test_transcript_shows_pages_and_the_crop_of_the_last_page(client):
    page = client.get("/rollout?run=pages&uid=u4&step=1&idx=0").text
    # 4_1 is the same document as the golden 4_2; the crop is of the page shown last (4_2)
    assert page.count('<figure class="page same_doc">') == 2  # in its turn and in the list
    assert page.count('<figure class="page golden">') == 2
    assert page.count('class="crop-img"') == 1
    assert 'src="/img/4_2?bbox=%5B1%2C%202%2C%2030%2C%2040%5D"' in page
    crop = client.get("/img/4_2?bbox=%5B1%2C%202%2C%2030%2C%2040%5D")
    assert crop.headers["content-type"] == "image/png"
    with Image.open(io.BytesIO(crop.content)) as im:
        assert im.size == (29, 38)
    assert client.get("/img/4_2").headers["content-type"] == "image/png"
    assert client.get("/img/9_9").status_code == 404
    assert client.get("/img/4_2?bbox=1,2").status_code == 400


def test_no_image_root_serves_no_images(logs):
    c = local(create_app(ServeConfig(logs=logs)))
    assert c.get("/img/4_2").status_code == 404
    assert "<img" not in c.get("/rollout?run=base&uid=u4&step=1&idx=0").text


def test_export_writes_the_filters_ids(client):
    res = client.get("/export.csv?run=new&outcome=failure")
    table = pacsv.read_csv(io.BytesIO(res.content))
    assert table.column_names == ["run_id", "uid", "step", "rollout_idx"]
    assert table.to_pylist() == [
        {"run_id": "new", "uid": "u2", "step": 1, "rollout_idx": 1},
        {"run_id": "new", "uid": "u3", "step": 2, "rollout_idx": 1},
    ]
    pq_table = pq.read_table(io.BytesIO(client.get("/export.parquet?tag=zero_search").content))
    assert sorted(
        zip(pq_table["uid"].to_pylist(), pq_table["rollout_idx"].to_pylist(), strict=True)
    ) == [
        ("u1", 3),
        ("u2", 1),
    ]


def test_export_of_a_run_not_in_the_store_is_refused(client):
    # Before: 200 and a header-only file, so a script exporting a mistyped run got an empty id
    # list with no word (the rollouts page says "No run ... in this store"; the CLI exits 2).
    for fmt in ("csv", "parquet"):
        res = client.get(f"/export.{fmt}?run=new&run=nosuchrun")
        assert res.status_code == 400
        assert "run(s) nosuchrun not in" in unescape(res.text)
        assert "known runs: base, new, pages" in unescape(res.text)
    assert client.get("/export.csv?run=new").status_code == 200


def test_sql_api_answers_selects_and_refuses_the_rest(client):
    ok = post_sql(client, json={"sql": "SELECT count(*) AS n FROM explorer"})
    assert ok.status_code == 200 and ok.json()["rows"] == [[25]]  # 24 planted + 1 with pages
    for sql in (
        "DROP TABLE explorer",
        "COPY explorer TO 'x.csv'",
        "SELECT * FROM read_csv('/etc/passwd')",
    ):
        assert post_sql(client, json={"sql": sql}).status_code == 400
    assert post_sql(client, json={"query": "SELECT 1"}).status_code == 400
    bad = post_sql(client, content=b"not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "send JSON" in bad.json()["error"]


def test_sql_api_shows_non_finite_numbers_as_the_csv_export_spells_them(client):
    """``ln(0)``, ``1.0 / 0.0`` and ``0.0 / 0.0`` are -inf, inf and NaN in DuckDB; JSON has no
    such numbers, and the answer was a 500 (Starlette refuses them) instead of the result."""
    sql = "SELECT ln(0.0) AS a, 1.0 / 0.0 AS b, 0.0 / 0.0 AS c, [0.0 / 0.0, 1.5] AS l, 2.5::DOUBLE AS d"
    res = post_sql(client, json={"sql": sql})
    assert res.status_code == 200, res.text
    assert res.json()["rows"] == [["-inf", "inf", "NaN", ["NaN", 1.5], 2.5]]
    assert (
        _post(client, "/api/sql/export.csv", sql).text.splitlines()[1].startswith("-inf,inf,NaN,")
    )


def test_sections_and_static_assets(client):
    html = client.get("/sections").text
    assert 'href="/?run=base&amp;outcome=success">8<' in html
    assert 'href="/?run=base&amp;group=zero_variance">8<' in html
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000
    assert client.get("/static/explorer.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/../app.py").status_code == 404


def test_grid_cells_and_score_bands_link_to_their_rollouts(client):
    html = client.get("/sections").text
    grid = html.split('<table class="grid judge-ndcg" data-run="base">')[1].split("</table>")[0]
    # judge 1 × NDCG 1 in base: u1/0 and u4 ×4
    link = "/?run=base&amp;judge_level=1.0&amp;ndcg_band=6"
    assert f'href="{link}">5<' in grid
    page = client.get(link.replace("&amp;", "&")).text
    assert '<span id="total">5</span>' in page
    assert 'name="judge_level" value="1.0"' in page  # the form keeps the cell when re-applied
    bands = html.split('class="grid score-bands"')[1].split("</table>")[0]
    # base's (0.5, 0.7] band: u2 (mean 0.625), 1 prompt / 4 rollouts
    assert (
        'href="/?run=base&amp;score_band=3">1</a> / <a class="count" href="/?run=base&amp;score_band=3">4<'
        in bands
    )
    api = client.get("/api/rollouts?run=base&score_band=3").json()
    assert api["total"] == 4 and {r["uid"] for r in api["rows"]} == {"u2"}
    assert client.get("/?ndcg_band=9").status_code == 400


def test_token_is_required_when_set(logs):
    c = local(create_app(ServeConfig(logs=logs, host="0.0.0.0", token=TOKEN)))
    assert c.get("/").status_code == 401
    assert c.get("/?token=wrong-token-wrong-token").status_code == 401
    assert c.get("/api/rollouts", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    first = c.get(f"/?token={TOKEN}")
    assert first.status_code == 200 and "ddai_token" in first.headers["set-cookie"]
    assert "httponly" in first.headers["set-cookie"].lower()
    assert c.get("/sections").status_code == 200  # the cookie carries it now


def test_the_explorer_follows_the_store(tmp_path):
    logs = planted_store(tmp_path)
    ex = Explorer(ServeConfig(logs=logs), recheck_s=0)
    c = local(create_app(ServeConfig(logs=logs), explorer=ex))
    assert c.get("/api/rollouts").json()["total"] == 24
    assert ex.builds == 1
    store.write_run(logs, "third", planted_rows()["new"])
    assert c.get("/api/rollouts?run=third").json()["total"] == 8
    assert c.get("/api/rollouts").json()["total"] == 32
    assert ex.builds == 2


def test_sections_compare_links_prompts_to_both_runs(client):
    html = client.get("/sections?a=base&b=new").text
    better = html.split('class="grid better"')[1].split("</table>")[0]
    assert 'href="/group?uid=u1&run=base&run=new"' in better
    assert "+50.0 pts" in better
    worse = html.split('class="grid worse"')[1].split("</table>")[0]
    assert 'href="/?uid=u2&run=base&run=new"' in worse and "-50.0 pts" in worse
    assert client.get("/sections?a=base&b=base").status_code == 400
    assert client.get("/sections?a=base&b=nope").status_code == 400
    # the group of a compared prompt shows both runs' groups
    group = client.get("/group?uid=u1&run=base&run=new").text
    assert group.count('<section class="group"') == 2


def test_pages_are_drawn_from_the_corpus_without_image_files(logs, tmp_path):
    corpus = Corpus.from_records(
        [
            {
                "page_id": "4_2",
                "doc_id": "4",
                "page": 2,
                "text": "Revenue\nEast 12",
                "width": 400,
                "height": 300,
            }
        ]
    )
    corpus.save(tmp_path / "pages.parquet")
    c = local(create_app(ServeConfig(logs=logs, corpus=tmp_path)))
    page = c.get("/img/4_2")
    assert page.headers["content-type"] == "image/png"
    with Image.open(io.BytesIO(page.content)) as im:
        assert im.size == (400, 300)
    with Image.open(io.BytesIO(c.get("/img/4_2?bbox=0,0,100,50").content)) as im:
        assert im.size == (100, 50)
    assert c.get("/img/4_9").status_code == 404
    assert 'class="crop-img"' in c.get("/rollout?run=pages&uid=u4&step=1&idx=0").text


def test_an_image_corpus_serves_its_own_files(logs, tmp_path):
    Image.new("RGB", (64, 48), "red").save(tmp_path / "4_2.png")
    Corpus.from_records(
        [
            {
                "page_id": "4_2",
                "doc_id": "4",
                "page": 2,
                "text": "",
                "width": 64,
                "height": 48,
                "image": "4_2.png",
            }
        ]
    ).save(tmp_path / "pages.parquet")
    c = local(create_app(ServeConfig(logs=logs, corpus=tmp_path / "pages.parquet")))
    with Image.open(io.BytesIO(c.get("/img/4_2").content)) as im:
        assert im.size == (64, 48) and im.convert("RGB").getpixel((5, 5)) == (255, 0, 0)


def test_report_route_builds_the_report_of_the_served_runs(logs):
    client = local(create_app(ServeConfig(logs=logs, runs=["pages"])))
    res = client.get("/report")
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/html")
    title = res.text.split("<title>", 1)[1].split("</title>", 1)[0]
    assert "pages" in title and "base" not in title  # the explorer's --run reaches the report


def test_a_bad_view_parameter_is_400_on_every_route_that_reads_a_view(logs):
    client = local(create_app(ServeConfig(logs=logs, token=TOKEN)))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/?judge_min=x", "/api/rollouts?judge_min=x", "/export.csv?judge_min=x"):
        res = client.get(path, headers=auth)
        text = unescape(res.text)  # the page escapes the message
        assert res.status_code == 400 and "judge_min='x' is not a number" in text, path
    assert client.get("/export.csv?judge_min=x").status_code == 401  # the token comes first


def test_an_empty_store_says_so_on_every_page_and_the_report_is_not_a_500(tmp_path):
    # Before: "0 rollouts" tables with no word why, and /report answered 500 Internal Server Error.
    logs = tmp_path / "logs"
    logs.mkdir()
    ex = Explorer(ServeConfig(logs=logs), recheck_s=0)
    client = local(create_app(ServeConfig(logs=logs), explorer=ex))
    for path in ("/", "/sections"):
        res = client.get(path)
        assert res.status_code == 200
        text = " ".join(unescape(res.text).split())
        assert f"The log store {logs} holds no rollouts yet" in text
        assert f"ddai ingest FILE --logs {logs}" in text
    res = client.get("/report")
    assert res.status_code == 404 and "No report to build" in unescape(res.text)
    # once a run is ingested the notice goes and the report builds
    store.write_run(logs, "base", planted_rows()["base"])
    assert "holds no rollouts" not in client.get("/").text
    assert client.get("/report").status_code == 200


def test_table_says_when_nothing_matches_or_the_page_is_past_the_end(client):
    html = unescape(client.get("/?run=nosuchrun").text)
    assert "No run nosuchrun in this store; its runs are base, new, pages." in html
    assert 'id="no-match"' in html and '<span id="total">0</span>' in html
    html = unescape(client.get("/?run=base&page=99999").text)
    assert "Page 99,999 is past the last page (1 of 50 rows)" in html
    assert 'href="/?run=base&page=1"' not in html  # page 1 is the default: no parameter
    assert 'id="past-end"' in html and "page 99,999 of" not in html
    html = unescape(client.get("/?run=base&size=5").text)
    assert "page 1 of 4" in html and html.count('class="row ') == 5
    assert 'id="no-match"' not in html and 'id="past-end"' not in html


def test_table_shows_question_first_and_filters_as_removable_chips(client):
    html = unescape(client.get("/?run=base&run=new&outcome=failure&reward_max=0.5").text)
    head = html.split("<thead>")[1].split("</thead>")[0]
    assert head.index("question") < head.index("run_id")
    chips = [c.split('"')[0] for c in html.split('class="chip" href="/?')[1:]]
    assert chips == [
        "run=new&outcome=failure&reward_max=0.5",
        "run=base&outcome=failure&reward_max=0.5",
        "run=base&run=new&reward_max=0.5",
        "run=base&run=new&outcome=failure",
    ]
    # every run is a checkbox of the searchable run list, the chosen ones checked
    assert html.count('class="run-option"') == 3
    assert '<input type="checkbox" name="run" value="base" checked>' in html


def test_transcript_links_previous_and_next_in_the_filter_it_came_from(client):
    f = urlencode({"f": "run=base&sort=reward&dir=desc"})
    html = unescape(client.get(f"/rollout?run=base&uid=u2&step=1&idx=2&{f}").text)
    assert "9 of 16 in" in html
    prev = html.split('id="prev-rollout" href="')[1].split('"')[0]
    nxt = html.split('id="next-rollout" href="')[1].split('"')[0]
    assert prev == f"/rollout?run=base&uid=u4&step=1&idx=3&{f}"
    assert nxt == f"/rollout?run=base&uid=u1&step=1&idx=2&{f}"
    # no filter: the whole table in its default order
    html = unescape(client.get("/rollout?run=base&uid=u1&step=1&idx=0").text)
    assert "first rollout" in html and 'id="next-rollout"' in html
    # a key without its step (a SQL result): the one rollout it names
    assert client.get("/rollout?run=base&uid=u1&idx=0").status_code == 200


def test_invalid_turn_shows_the_raw_text_the_model_wrote(client):
    html = unescape(client.get("/rollout?run=base&uid=u2&step=1&idx=3").text)
    turn = html.split('id="turn-0"')[1].split("</li>")[0]
    assert "invalid turn" in turn and "empty search" in turn
    assert '<pre class="raw text shown"><think>a</think>' in turn
    assert "think —" not in turn
    # valid turns carry their raw text too, shown by the raw toggle
    assert html.count('<pre class="raw text">') == 2 and 'id="raw-toggle"' in html


def test_a_rollout_without_turns_says_why(tmp_path):
    logs = tmp_path / "logs"
    row = dict(planted_rows()["base"][0], turns=None, response=None, num_turns=None, step=None)
    store.write_run(logs, "bare", [row])
    c = local(create_app(ServeConfig(logs=logs)))
    html = unescape(c.get("/rollout?run=bare&uid=u1&step=&idx=0").text)
    assert "No turns: the log of run bare records neither turns nor response text" in html
    assert "step —" not in html and " · step" not in html.split("<h1>")[1].split("</h1>")[0]
    group = unescape(c.get("/group?uid=u1&run=bare").text)
    assert "no step recorded" in group and "not recorded" in group and "turns — (—)" not in group
    assert "step —" not in group


def _post(client, path: str, sql: str):
    from serve_world import page_token

    return client.post(path, headers={"X-DDAI-Token": page_token(client)}, json={"sql": sql})


def test_sql_result_exports_as_csv_and_parquet_with_escaped_cells(client):
    sql = (
        "SELECT run_id, uid, rollout_idx, '=HYPERLINK(1)' AS f, ['a', 'b'] AS l FROM explorer "
        "WHERE run_id = 'base' AND uid = 'u1' ORDER BY rollout_idx"
    )
    res = _post(client, "/api/sql/export.csv", sql)
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/csv")
    assert res.headers["X-DDAI-Rows"] == "4" and res.headers["X-DDAI-Truncated"] == "0"
    lines = res.text.splitlines()
    assert lines[0] == "run_id,uid,rollout_idx,f,l"
    # the formula is escaped as csv_cells does it; a list is its JSON text
    assert lines[1] == """base,u1,0,'=HYPERLINK(1),"[""a"", ""b""]\""""
    table = pq.read_table(io.BytesIO(_post(client, "/api/sql/export.parquet", sql).content))
    assert table.column("rollout_idx").to_pylist() == [0, 1, 2, 3]
    assert table.column("l").to_pylist()[0] == ["a", "b"]
    # the SQL box's locks hold for exports: no write, no file, no export without the token
    assert _post(client, "/api/sql/export.csv", "COPY explorer TO '/tmp/x.csv'").status_code == 400
    assert client.post("/api/sql/export.csv", json={"sql": "SELECT 1"}).status_code == 403
    assert _post(client, "/api/sql/export.xlsx", "SELECT 1").status_code == 404


@pytest.mark.parametrize("path", ["/api/sql", "/api/sql/export.csv"])
@pytest.mark.parametrize(
    "body", [b"not json", b'{"query": "SELECT 1"}', b'{"sql": 1}', b'["SELECT 1"]', b'"SELECT 1"']
)
def test_both_sql_endpoints_refuse_a_body_without_sql_text(client, path, body):
    from serve_world import page_token

    headers = {"X-DDAI-Token": page_token(client), "Content-Type": "application/json"}
    res = client.post(path, headers=headers, content=body)
    assert res.status_code == 400 and res.json() == {"error": 'send JSON {"sql": "SELECT …"}'}


def test_sql_page_keeps_the_query_of_its_url(client):
    html = client.get("/sql?" + urlencode({"q": "SELECT 42 AS <b>"})).text
    assert 'data-autorun="1"' in html and "SELECT 42 AS &lt;b&gt;</textarea>" in html
    assert 'data-autorun=""' in client.get("/sql").text


def test_sql_page_lists_every_relation_a_select_can_read(client):
    """The page's list is the build's own: it named six views by hand and left out the
    analyses' views and annotations, which the docs list and a SELECT reads."""
    import re

    html = client.get("/sql").text
    listed = re.findall(r"<code>(\w+)</code>", html.split('id="sql-views">')[1].split("</span>")[0])
    for name in ("explorer", "rollouts", "turns", "annotations", "failure_attribution"):
        assert name in listed, listed
    for name in listed:
        res = post_sql(client, json={"sql": f"SELECT count(*) AS n FROM {name}"})
        assert res.status_code == 200, (name, res.text)


def test_report_is_built_once_per_store_version(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "base", planted_rows()["base"])
    ex = Explorer(ServeConfig(logs=logs), recheck_s=0)
    app = create_app(ServeConfig(logs=logs), explorer=ex)
    client = local(app)
    first = client.get("/report")
    again = client.get("/report")
    assert first.status_code == again.status_code == 200 and first.text == again.text
    assert app.state.report["count"] == 1  # the second click read the cached report
    assert first.headers["X-DDAI-Report-Version"] == ex.version
    store.write_run(logs, "new", planted_rows()["new"])  # a commit moves the store's version
    after = client.get("/report")
    assert app.state.report["count"] == 2
    assert after.headers["X-DDAI-Report-Version"] != first.headers["X-DDAI-Report-Version"]
    assert "new" in after.text.split("<title>", 1)[1].split("</title>", 1)[0]


def test_a_flash_log_rollout_says_it_has_no_turns(tmp_path, shared):
    from ddai.pipelines.ingest import IngestConfig, ingest

    src = shared / "ddai-formats" / "examples" / "flash_rm_detail.jsonl"
    logs = tmp_path / "logs"
    res = ingest(IngestConfig([src], logs, progress=False))
    assert set(res.formats.values()) == {"ddai-flash"}
    c = local(create_app(ServeConfig(logs=logs)))
    first = c.get("/api/rollouts?size=1").json()["rows"][0]
    run, uid, step, idx = (first[k] for k in ("run_id", "uid", "step", "rollout_idx"))
    step = "" if step is None else step
    html = " ".join(
        unescape(c.get(f"/rollout?run={run}&uid={uid}&step={step}&idx={idx}").text).split()
    )
    # before: an empty turn list with no word why
    assert f"No turns: run {run} was ingested from a DDAI flash log (flash_rm_detail.jsonl)" in html
    assert '<ol class="turns"> </ol>' in html


def test_scored_turns_show_their_value(tmp_path):
    logs = tmp_path / "logs"
    row = dict(planted_rows()["base"][12], uid="u4")
    turns = [_turn(0, "search", "q a", ["4_2"]), _turn(1, "search_complete", "true", None)]
    turns[0]["value"] = 0.625  # `ddai value score` wrote the first turn's value only
    store.write_run(logs, "scored", [{**row, "turns": turns}])
    html = local(create_app(ServeConfig(logs=logs))).get("/rollout?run=scored&uid=u4&step=1&idx=0")
    first, second = html.text.split('id="turn-1"')
    assert '<div class="value"' in first and "value 0.625" in first
    assert '<div class="value"' not in second  # an unvalued turn shows no value


def test_sections_show_an_unjudged_run_s_success_rate_as_unknown(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "unjudged", [{"uid": "x", "rollout_idx": i} for i in range(3)])
    html = local(create_app(ServeConfig(logs=logs))).get("/sections").text
    row = html.split("<td>unjudged</td>")[1].split("</tr>")[0]
    assert "0.0%" not in row and "<td>—</td>" in row


def test_sections_say_why_a_table_has_nothing_to_show(tmp_path):
    # a run with neither judge, NDCG nor reward: no class, no grid cell, no band, no scored
    # group, no suspect; each section says so instead of a header-only table or a bare heading
    logs = tmp_path / "logs"
    store.write_run(logs, "bare", [{"uid": "x", "rollout_idx": i} for i in range(3)])
    html = local(create_app(ServeConfig(logs=logs))).get("/sections").text
    expected = {
        "classes": "No rollout falls in a class",
        "judge-ndcg": "No rollout has both a judge score and NDCG",
        "bands": "No prompt has a score",
        "groups": "No GRPO group has two or more scored rollouts",
        "suspects": "No rollout is judged: no hallucination suspect can be counted",
    }
    for sid, says in expected.items():
        sec = html.split(f'<section id="{sid}">')[1].split("</section>")[0]
        assert says in unescape(sec), sid
        assert "<table" not in sec, sid


def test_links_keep_a_chosen_page_size_that_is_not_the_served_default(logs):
    # Before: with --page-size 4, a table at size=50 linked its sort headers and pages without
    # size (50 was taken as everyone's default), so the next click showed pages of 4 rows.
    c = local(create_app(ServeConfig(logs=logs, page_size=4)))
    assert '<span id="total">' in c.get("/").text
    html = c.get("/?size=50").text.replace("&amp;", "&")
    sort = html.split('data-col="reward" href="/?')[1].split('"')[0]
    assert parse_qs(sort)["size"] == ["50"]
    html = c.get("/?page=2").text.replace("&amp;", "&")
    prev = html.split('id="prev" href="/?')[1].split('"')[0]
    assert parse_qs(prev)["size"] == ["4"]
    assert len(c.get("/api/rollouts").json()["rows"]) == 4


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({}, "No rollout is judged: no hallucination suspect can be counted"),
        (
            {"judge_score": 1.0},
            "No judged rollout has reference pages: no hallucination suspect can be counted",
        ),
        (
            {"judge_score": 0.2, "reference_pages": ["x_1"]},
            "No hallucination suspect among 3 judged rollouts with reference pages",
        ),
    ],
)
def test_sections_say_why_no_rollout_is_a_hallucination_suspect(tmp_path, extra, says):
    # before: all three read "no rollout with reference pages was judged correct without a
    # golden page", as if suspects were counted where nothing could be
    logs = tmp_path / "logs"
    store.write_run(logs, "r", [{"uid": "x", "rollout_idx": i, **extra} for i in range(3)])
    html = local(create_app(ServeConfig(logs=logs))).get("/sections").text
    sec = " ".join(
        unescape(html.split('<section id="suspects">')[1].split("</section>")[0]).split()
    )
    assert says in sec
    assert "<table" not in sec
