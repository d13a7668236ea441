"""Who may reach the explorer: the Host check (DNS rebinding) and the POST guard (JSON and the
page token), through the test client and through a real server on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest
from report_world import planted_store
from serve_world import local, page_token, post_sql, served
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.guard import Guard, host_of

TOKEN = "t" * 24
SQL = {"sql": "SELECT count(*) AS n FROM explorer"}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return planted_store(tmp_path_factory.mktemp("guard"))


@pytest.fixture(scope="module")
def app(logs):
    return create_app(ServeConfig(logs=logs))


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.1:8765", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8765", "::1"),
        ("[::1]", "::1"),
        ("attacker.example:80", "attacker.example"),
        ("attacker.example@127.0.0.1", None),
        ("127.0.0.1:8765/x", None),
        ("", None),
        (None, None),
    ],
)
def test_host_of_reads_a_host_header(header, host):
    assert host_of(header) == host


@pytest.mark.parametrize(
    "path", ["/api/rollouts", "/", "/sql", "/export.csv", "/static/explorer.js"]
)
def test_a_page_under_another_name_is_refused(app, path):
    # DNS rebinding: the attacker's name resolves to 127.0.0.1, its page's requests carry it
    c = TestClient(app, base_url="http://attacker.example:8765")
    res = c.get(path)
    assert res.status_code == 403
    assert "attacker.example" in res.text and "--allow-host" in res.text
    assert "base" not in res.text  # no run id, no row
    assert c.post("/api/sql", json=SQL).status_code == 403


@pytest.mark.parametrize(
    "base", ["http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"]
)
def test_loopback_names_are_answered(app, base):
    res = TestClient(app, base_url=base).get("/api/rollouts?total=1")
    assert res.status_code == 200 and res.json()["total"] == 24


def test_the_bound_address_and_allowed_names_are_answered_and_no_other(logs):
    cfg = ServeConfig(logs=logs, host="10.1.2.3", token=TOKEN, allow_hosts=["Box.LAN"])
    app = create_app(cfg)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for base in ("http://10.1.2.3:8765", "http://box.lan", "http://BOX.lan:1", "http://127.0.0.1"):
        assert TestClient(app, base_url=base).get("/api/rollouts", headers=auth).status_code == 200
    for base in ("http://10.1.2.4", "http://other.lan", "http://box.lan.attacker.example"):
        assert TestClient(app, base_url=base).get("/api/rollouts", headers=auth).status_code == 403
    # bound to every interface: 0.0.0.0 names no host (browsers send it to this machine)
    wild = create_app(ServeConfig(logs=logs, host="0.0.0.0", token=TOKEN))
    assert (
        TestClient(wild, base_url="http://0.0.0.0:8765").get("/", headers=auth).status_code == 403
    )


@pytest.mark.parametrize("name", ["http://box.lan", "box.lan:80", "box lan", "a/b", ""])
def test_an_allowed_host_must_be_a_bare_name(logs, name):
    with pytest.raises(ValueError, match="--allow-host"):
        ServeConfig(logs=logs, allow_hosts=[name])


def test_sql_posts_need_json_and_the_page_token(app):
    c = local(app)
    token = page_token(c)
    assert len(token) >= 32 and token == app.state.page_token
    assert post_sql(c, json=SQL).json()["rows"] == [[24]]
    # what a page of another origin can send without asking (no preflight): text/plain, a form
    plain = c.post(
        "/api/sql",
        content=b'{"sql": "SELECT 1"}',
        headers={"Content-Type": "text/plain", "X-DDAI-Token": token},
    )
    assert plain.status_code == 415 and "application/json" in plain.json()["error"]
    form = c.post("/api/sql", data={"sql": "SELECT 1"}, headers={"X-DDAI-Token": token})
    assert form.status_code == 415
    assert c.post("/api/sql", content=b'{"sql": "SELECT 1"}').status_code == 415
    # JSON without the token, or with another one
    missing = c.post("/api/sql", json=SQL)
    assert missing.status_code == 403 and "X-DDAI-Token" in missing.json()["error"]
    assert post_sql(c, json=SQL, headers={"X-DDAI-Token": token[:-1] + "x"}).status_code == 403
    assert post_sql(c, json=SQL, headers={"X-DDAI-Token": ""}).status_code == 403
    charset = post_sql(c, json=SQL, headers={"Content-Type": "application/json; charset=utf-8"})
    assert charset.status_code == 200


def test_each_process_makes_its_own_token(logs, app):
    other = create_app(ServeConfig(logs=logs))
    assert other.state.page_token != app.state.page_token
    stale = {"X-DDAI-Token": app.state.page_token}
    assert local(other).post("/api/sql", json=SQL, headers=stale).status_code == 403


def test_the_guard_covers_every_unsafe_method_of_any_route():
    # the routes that come later (annotations) get the same guard without code of their own
    async def write(request):
        return PlainTextResponse("written")

    app = Starlette(routes=[Route("/w", write, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])])
    guarded = TestClient(
        Guard(app, hosts=["127.0.0.1"], token="k" * 32), base_url="http://127.0.0.1"
    )
    ok = {"Content-Type": "application/json", "X-DDAI-Token": "k" * 32}
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert guarded.request(method, "/w", content=b"{}").status_code == 415
        assert guarded.request(method, "/w", content=b"{}", headers=ok).text == "written"
    assert guarded.get("/w").text == "written"


def test_a_real_server_refuses_a_rebound_host_and_a_cross_origin_post(app):
    with served(app) as url:
        # curl -H 'Host: attacker.example' 127.0.0.1:PORT/api/rollouts
        res = httpx.get(f"{url}/api/rollouts", headers={"Host": "attacker.example"})
        assert res.status_code == 403 and "rows" not in res.json()
        assert httpx.get(f"{url}/api/rollouts").json()["total"] == 24
        # a no-cors POST from another origin: text/plain, the Origin of the other site
        res = httpx.post(
            f"{url}/api/sql",
            content=b'{"sql": "SELECT 1"}',
            headers={"Content-Type": "text/plain", "Origin": "http://attacker.example"},
        )
        assert res.status_code == 415
        html = httpx.get(f"{url}/sql").text
        token = html.split('<meta name="ddai-token" content="')[1].split('"')[0]
        res = httpx.post(f"{url}/api/sql", json=SQL, headers={"X-DDAI-Token": token})
        assert res.json()["rows"] == [[24]]
