"""The SQLite call cache: keys, persistence, group-committed writes, several writers."""

from __future__ import annotations

import threading

import pytest

from ddai.pipelines.backends.cache import CacheError, CallCache, cache_key
from ddai.pipelines.backends.usage import TokenUsage


def put(c: CallCache, key: str, value: object) -> None:
    c.put(key, value, TokenUsage(3, 4), kind="openai", model="m", role="judge")


def test_key_is_canonical_and_sensitive_to_every_part():
    a = cache_key(kind="openai", model="m", inputs={"q": "x", "a": "y"})
    assert a == cache_key(inputs={"a": "y", "q": "x"}, model="m", kind="openai")
    assert a != cache_key(kind="openai", model="m2", inputs={"q": "x", "a": "y"})
    assert a != cache_key(kind="openai", model="m", inputs={"q": "x", "a": "y "})


def test_roundtrip_persists_across_instances(tmp_path):
    path = tmp_path / "c.sqlite"
    with CallCache(path) as c:
        put(c, "k1", {"score": 1.0, "reason": "é"})
        # Visible before the writer commits it.
        assert c.get("k1").value == {"score": 1.0, "reason": "é"}
    with CallCache(path) as c:
        hit = c.get("k1")
        assert hit.value == {"score": 1.0, "reason": "é"} and hit.usage == TokenUsage(3, 4)
        assert c.get("missing") is None
        stats = c.stats()
        assert stats["entries"] == 1
        assert stats["groups"] == [
            {
                "kind": "openai",
                "model": "m",
                "role": "judge",
                "endpoint": None,
                "entries": 1,
                "input_tokens": 3,
                "output_tokens": 4,
            }
        ]


def test_many_keys_lookup_in_chunks(tmp_path):
    with CallCache(tmp_path / "c.sqlite") as c:
        for i in range(1200):
            put(c, f"k{i}", i)
        c.flush()
        got = c.get_many(f"k{i}" for i in range(0, 1300, 2))
        assert len(got) == 600 and got["k1198"].value == 1198


def test_two_caches_on_one_file_from_threads(tmp_path):
    path = tmp_path / "c.sqlite"
    caches = [CallCache(path), CallCache(path)]

    def write(c: CallCache, start: int) -> None:
        for i in range(start, start + 300):
            put(c, f"k{i}", i)
        c.flush()

    threads = [threading.Thread(target=write, args=(c, 300 * n)) for n, c in enumerate(caches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in caches:
        c.close()
    with CallCache(path) as c:
        assert c.stats()["entries"] == 600


def test_idle_writer_exits_and_a_later_put_restarts_it(tmp_path, monkeypatch):
    import time

    from ddai.pipelines.backends import cache as cache_mod

    monkeypatch.setattr(cache_mod, "_IDLE_S", 0.02)
    with CallCache(tmp_path / "c.sqlite") as c:
        put(c, "a", 1)
        c.flush()
        deadline = time.time() + 5
        while c._writer is not None and time.time() < deadline:
            time.sleep(0.01)
        assert c._writer is None  # no thread held by an idle cache
        put(c, "b", 2)
        c.flush()
    with CallCache(tmp_path / "c.sqlite") as c:
        assert {k: v.value for k, v in c.get_many(["a", "b"]).items()} == {"a": 1, "b": 2}


def _damaged(tmp_path, how: str):
    """A cache file cut in half (a copy or a disk that filled up mid-write) or not SQLite."""
    path = tmp_path / "calls.sqlite"
    with CallCache(path) as c:
        for i in range(300):
            put(c, f"k{i}", {"score": i, "reason": "x" * 200})
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(b"not a database at all\n" * 100)
    return path


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_damaged_cache_file_is_named_with_the_fix(tmp_path, how):
    path = _damaged(tmp_path, how)
    with pytest.raises(CacheError) as e:
        CallCache(path)
    msg = str(e.value)
    assert str(path) in msg and "move it aside" in msg and "paid again" in msg
    assert isinstance(e.value, ValueError)  # the commands' bad-input exit (2)


def test_judge_and_backends_check_with_a_damaged_cache_exit_2_naming_it(tmp_path, monkeypatch):
    from support.backends import backend_toml
    from typer.testing import CliRunner

    from ddai.cli.app import app
    from ddai.pipelines import store

    path = _damaged(tmp_path, "truncated")
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    toml = backend_toml(tmp_path, "fake", "http://127.0.0.1:9/v1", model="m", api_key_env="K")
    monkeypatch.setenv("DDAI_CONFIG", str(toml))
    monkeypatch.setenv("K", "k")
    logs = tmp_path / "logs"
    store.write_run(logs, "r1", [{"uid": "u0", "rollout_idx": 0, "answer": "a", "gt": "a"}])
    runner = CliRunner()
    for args in (
        ["backends", "check", "--no-ping", "--cache", str(path)],
        ["judge", "--logs", str(logs), "--run", "r1", "--judge", "fake", "--cache", str(path)],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output, res.exception)
        assert "move it aside" in res.output, res.output


def test_a_cache_on_a_full_disk_is_not_called_damaged(tmp_path, monkeypatch):
    import sqlite3

    from ddai.pipelines.backends import cache

    def full(path):
        e = sqlite3.OperationalError("database or disk is full")
        e.sqlite_errorname = "SQLITE_FULL"
        raise e

    monkeypatch.setattr(cache, "_connect", full)
    with pytest.raises(CacheError) as e:
        CallCache(tmp_path / "c.sqlite")
    assert "free space" in str(e.value) and "move it aside" not in str(e.value)
