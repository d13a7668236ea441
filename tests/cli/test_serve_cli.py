"""``ddai serve`` from the command line: flags into the config, exit 2 on bad input, token rules.

uvicorn.run is replaced by a recorder, so no test binds a port here (the browser test serves).
"""

from __future__ import annotations

import duckdb
import pytest
import uvicorn
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.reports.serve import is_loopback
from ddai.reports.serve.config import machine_memory

runner = CliRunner()


@pytest.fixture
def started(monkeypatch):
    calls: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append({"app": app, **kw}))
    return calls


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    logs = tmp_path_factory.mktemp("store") / "logs"
    rows = [
        {"uid": f"u{i // 4}", "rollout_idx": i % 4, "response": "", "reward": i % 2}
        for i in range(24)
    ]
    store.write_run(logs, "r1", rows)
    return logs


def test_help_explains_every_flag():
    res = runner.invoke(app, ["serve", "--help"])
    assert res.exit_code == 0
    for flag in (
        "--logs",
        "--run",
        "--datasets-dir",
        "--image-root",
        "--corpus",
        "--host",
        "--port",
        "--token",
        "--page-size",
        "--success-threshold",
        "--threads",
        "--allow-host",
        "--memory-share",
        "--sql-timeout",
        "--annotate",
        "--annotator",
        "--review",
        "--decisions-out",
    ):
        assert flag in res.output


def test_loopback_serves_without_a_token(logs, started):
    res = runner.invoke(app, ["serve", "--logs", str(logs), "--port", "8799"])
    assert res.exit_code == 0, res.output
    assert "24 rollouts" in res.output and "http://127.0.0.1:8799/ " in res.output
    assert "token=" not in res.output
    (call,) = started
    assert (call["host"], call["port"]) == ("127.0.0.1", 8799)


def test_host_names_memory_share_and_sql_timeout_reach_the_explorer(logs, started):
    args = ["--allow-host", "Box.lan", "--allow-host", "10.0.0.7", "--memory-share", "0.1"]
    res = runner.invoke(app, ["serve", "--logs", str(logs), *args, "--sql-timeout", "5"])
    assert res.exit_code == 0, res.output
    assert "answers Host 127.0.0.1, localhost, ::1, box.lan, 10.0.0.7" in res.output
    (call,) = started
    cfg = call["app"].state.explorer.cfg
    assert (cfg.allow_hosts, cfg.memory_share, cfg.sql_timeout_s) == (
        ["box.lan", "10.0.0.7"],
        0.1,
        5.0,
    )
    setting = "SELECT current_setting('memory_limit')"
    ref = duckdb.connect()  # DuckDB's rendering of 10% of the machine, not its 80% default
    ref.execute("SET memory_limit = $m", {"m": f"{int(machine_memory() * 0.1)}B"})
    got = call["app"].state.explorer.current.con.sql(setting).fetchall()
    assert got == ref.sql(setting).fetchall()
    ref.close()
    assert f"at most {cfg.memory_limit() / 2**30:.1f} GiB" in res.output


def test_another_host_gets_a_token(logs, started):
    res = runner.invoke(app, ["serve", "--logs", str(logs), "--host", "0.0.0.0"])
    assert res.exit_code == 0, res.output
    token = res.output.split("?token=")[1].split()[0]
    assert len(token) >= 24
    given = "g" * 20
    res = runner.invoke(app, ["serve", "--logs", str(logs), "--host", "0.0.0.0", "--token", given])
    assert f"?token={given}" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--logs", "/nonexistent/logs"], "does not exist"),
        (["--image-root", "/nonexistent/img"], "--image-root"),
        (["--corpus", "/nonexistent/pages.parquet"], "--corpus"),
        (["--port", "0"], "--port"),
        (["--page-size", "0"], "--page-size"),
        (["--token", "short"], "at least 16"),
        (["--run", "nope"], "nope"),
        (["--allow-host", "http://box.lan:80"], "--allow-host"),
        (["--memory-share", "0"], "--memory-share"),
        (["--memory-share", "1.5"], "--memory-share"),
        (["--sql-timeout", "0"], "--sql-timeout"),
        # before: accepted and ignored (without --annotate nothing is written under any name)
        (["--annotator", "kim"], "--annotator names who writes labels and decisions"),
    ],
)
def test_bad_input_exits_2_naming_it(logs, started, args, message):
    res = runner.invoke(app, ["serve", "--logs", str(logs), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert started == []


def test_is_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "192.168.1.4", "::", "example.org"]))


def test_annotate_and_review_flags_reach_the_app(logs, started, tmp_path, monkeypatch):
    monkeypatch.setenv("USER", "kim")
    sheet = tmp_path / "review.csv"
    sheet.write_text("uid,verdict,reason\nu0,,\nu1,,\n")
    res = runner.invoke(app, ["serve", "--logs", str(logs), "--annotate", "--review", str(sheet)])
    assert res.exit_code == 0, res.output
    assert "writes labels and decisions as kim (--annotate)" in res.output
    assert f"GT review of {sheet} at /review -> {tmp_path / 'review_decisions.csv'}" in res.output
    cfg = started[0]["app"].state.explorer.cfg
    assert (cfg.annotate, cfg.annotator, cfg.review) == (True, "kim", sheet)
    res = runner.invoke(app, ["serve", "--logs", str(logs)])
    assert "read-only (start with --annotate" in res.output


def test_decisions_out_without_review_exits_2(logs, started, tmp_path):
    res = runner.invoke(app, ["serve", "--logs", str(logs), "--decisions-out", str(tmp_path / "d")])
    assert res.exit_code == 2 and "add --review" in res.output
    assert started == []


def test_a_busy_port_exits_3_before_the_store_loads(logs, started, monkeypatch):
    import socket

    from ddai.reports.serve import explorer

    built: list[object] = []
    monkeypatch.setattr(explorer.Explorer, "_build", lambda self: built.append(self))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = runner.invoke(app, ["serve", "--logs", str(logs), "--port", str(port)])
    assert res.exit_code == 3, res.output
    assert f"127.0.0.1:{port} is in use: stop what listens there or pick another --port" in (
        " ".join(res.output.split())
    )
    assert built == [] and started == []  # nothing loaded, nothing served
    assert "ddai serve:" not in res.output  # it never says it is serving


def test_help_documents_the_exit_status():
    res = runner.invoke(app, ["serve", "--help"], terminal_width=200)
    text = " ".join(res.output.split())
    assert "0 when stopped" in text and "2 for bad input" in text
    assert "3 when it cannot listen" in text


def test_an_address_not_of_this_machine_exits_3(logs, started):
    res = runner.invoke(
        app, ["serve", "--logs", str(logs), "--host", "192.0.2.1", "--token", "t" * 20]
    )
    assert res.exit_code == 3, res.output
    assert "192.0.2.1:8765 cannot be bound" in res.output and "as --host" in res.output
    assert started == []
