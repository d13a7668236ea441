"""The call cache keys on the endpoint: a judge pointed at a second server under the same model
name calls that server (counted by it) instead of being answered from the first one's cache; the
same endpoint still hits the cache, so a resume pays for nothing twice. A cache written before
endpoints were keyed keeps its entries readable and never serves them."""

from __future__ import annotations

import json
import sqlite3

from cli_schemas import check
from support.fakes import FakeModelServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.backends import BackendSpec, JudgeRequest, build, run_sync
from ddai.pipelines.backends import remote as remote_mod
from ddai.pipelines.backends.cache import CallCache

REQS = [JudgeRequest(f"question {i}", "Paris", "Paris") for i in range(12)]


def judge_at(url: str, cache, **kw):
    spec = BackendSpec(
        name="judge", kind="openai", model="same-name", base_url=url, max_retries=0, **kw
    )
    return build(spec, "judge", cache=cache)


def test_a_second_endpoint_with_the_same_model_name_is_called(tmp_path):
    cache = tmp_path / "calls.sqlite"
    with FakeModelServer() as a, FakeModelServer() as b:
        out = run_sync(judge_at(a.openai_base_url, cache).judge(REQS))
        assert a.requests == 12 and all(r.score == 1.0 for r in out)
        out = run_sync(judge_at(b.openai_base_url, cache).judge(REQS))
        assert b.requests == 12 and a.requests == 12  # fresh calls, counted by the second server
        # The same endpoints again (a resume): all from the cache, no call paid twice.
        for srv in (a, b):
            judge = judge_at(srv.openai_base_url + "/", cache)  # a trailing slash is the same URL
            out = run_sync(judge.judge(REQS))
            assert all(r.score == 1.0 for r in out)
            assert judge.usage()["judge"]["cache_hits"] == 12
        assert a.requests == 12 and b.requests == 12
        # A generation setting is part of the identity too.
        run_sync(judge_at(a.openai_base_url, cache, temperature=0.7).judge(REQS[:3]))
        assert a.requests == 15
    with CallCache(cache) as c:
        groups = {g["endpoint"]: g["entries"] for g in c.stats()["groups"]}
    assert groups == {
        f"openai {a.openai_base_url} same-name": 15,
        f"openai {b.openai_base_url} same-name": 12,
    }


def test_a_dead_second_endpoint_fails_instead_of_answering_from_the_cache(tmp_path):
    cache = tmp_path / "calls.sqlite"
    with FakeModelServer() as a:
        run_sync(judge_at(a.openai_base_url, cache).judge(REQS))
    out = run_sync(judge_at("http://127.0.0.1:9/v1", cache, timeout_s=2).judge(REQS))
    assert all(r.score is None and r.error for r in out)


def test_entries_written_before_endpoint_keys_stay_readable_and_are_never_served(
    tmp_path, monkeypatch
):
    cache = tmp_path / "old.sqlite"
    with FakeModelServer() as srv:
        # The keys the previous version computed: the same identity without the endpoint.
        old_keys: list[str] = []
        real = remote_mod.cache_key

        def old_key(**identity):
            identity.pop("endpoint", None)
            old_keys.append(real(**identity))
            return old_keys[-1]

        judge = judge_at(srv.openai_base_url, False)
        monkeypatch.setattr(remote_mod, "cache_key", old_key)
        job = judge._job(REQS[0])
        monkeypatch.undo()
        assert job.key == old_keys[0]
        # A cache file as the previous version wrote it: no endpoint column.
        db = sqlite3.connect(cache)
        db.execute(
            "CREATE TABLE calls (key TEXT PRIMARY KEY, kind TEXT NOT NULL, model TEXT, role TEXT "
            "NOT NULL, value TEXT NOT NULL, input_tokens INTEGER NOT NULL DEFAULT 0, "
            "output_tokens INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL)"
        )
        db.execute(
            "INSERT INTO calls VALUES (?, 'openai', 'same-name', 'judge', ?, 5, 1, 0)",
            (job.key, '{"score": 0.0, "reason": "from another server"}'),
        )
        db.commit()
        db.close()
        with CallCache(cache) as c:
            assert c.get(job.key).value["reason"] == "from another server"  # readable
            stats = c.stats()
            assert stats["entries"] == 1 and stats["legacy_entries"] == 1
        (out,) = run_sync(judge_at(srv.openai_base_url, cache).judge(REQS[:1]))
        assert srv.requests == 1 and out.score == 1.0  # called, not served the old answer
    with CallCache(cache) as c:
        stats = c.stats()
        assert stats["entries"] == 2 and stats["legacy_entries"] == 1
    res = CliRunner().invoke(
        app, ["backends", "check", "--no-ping", "--cache", str(cache), "--json"]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    check("backends-check", summary)  # docs/schemas/backends-check.json
    assert summary["cache_entries"] == 2 and summary["cache_legacy_entries"] == 1
