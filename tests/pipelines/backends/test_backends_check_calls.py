"""``ddai backends check`` makes a real call per role: a model server that lists its models but
fails every completion is a failure (exit 1, naming the role, the URL and the status), where a
listing alone said "ok"."""

from __future__ import annotations

import json

from support.fakes import FakeModelServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.backends.check import check_backends

runner = CliRunner()


def config(url: str) -> dict:
    spec = {"kind": "openai", "model": "m", "base_url": url, "max_retries": 0, "timeout_s": 5}
    return {"backends": {"srv": spec}, "roles": {"judge": "srv", "generator": "srv"}}


def test_a_server_that_fails_every_completion_fails_the_check(tmp_path, monkeypatch):
    with FakeModelServer(script=["500"] * 4) as srv:
        url = srv.openai_base_url
        (tmp_path / "ddai.toml").write_text(
            f'[backends.srv]\nkind = "openai"\nmodel = "m"\nbase_url = "{url}"\n'
            'max_retries = 0\ntimeout_s = 5\n\n[roles]\njudge = "srv"\ngenerator = "srv"\n',
            encoding="utf-8",
        )
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("DDAI_CONFIG", raising=False)
        res = runner.invoke(app, ["backends", "check", "--json"])
        assert srv.requests == 2 and srv.faults == {"500": 2}  # one completion per role
        shown = runner.invoke(app, ["backends", "check"])
    assert res.exit_code == 1 and shown.exit_code == 1, res.output
    s = json.loads(res.stdout)
    assert s["unreachable"] == ["srv"]
    (row,) = [r for r in s["details"] if r["name"] == "srv"]
    calls = {c["role"]: c for c in row["ping"]["calls"]}
    assert set(calls) == {"judge", "generator"} and not any(c["ok"] for c in calls.values())
    for role in ("judge", "generator"):
        assert f"{role} call to {url}: http-500" in calls[role]["detail"]
        assert f"{role} call to {url}: http-500" in shown.stderr
    assert "backend 'srv' (judge, generator)" in shown.stderr
    assert "failed (judge call)" in shown.stdout


def test_a_working_server_answers_one_call_per_role_uncached(tmp_path):
    with FakeModelServer() as srv:
        out = check_backends(config(srv.openai_base_url), cache=tmp_path / "c.sqlite")
        assert srv.requests == 2
        out = check_backends(config(srv.openai_base_url), cache=tmp_path / "c.sqlite")
        assert srv.requests == 4  # never answered from the cache: a check must reach the server
    (row,) = [r for r in out["backends"] if r["name"] == "srv"]
    assert row["ping"]["ok"], row["ping"]
    assert [(c["role"], c["ok"]) for c in row["ping"]["calls"]] == [
        ("judge", True),
        ("generator", True),
    ]
    assert row["ping"]["calls"][0]["detail"] == "score 1.0"
