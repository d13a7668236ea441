"""The Gemini backend through the real ``google-genai`` SDK against the fake server."""

from __future__ import annotations

import pytest
from support.backends import PNG_1PX, judge_then_cancel, quick_spec
from support.fakes import FakeModelServer

from ddai.pipelines.backends import (
    BackendSpec,
    JudgeRequest,
    VerifyRequest,
    VQARequest,
    build,
    run_sync,
)
from ddai.pipelines.backends.cache import CallCache

PNG = PNG_1PX


def spec(srv: FakeModelServer, **kw) -> BackendSpec:
    return quick_spec("flash", "gemini", "gemini-fake", srv.url, **kw)


@pytest.mark.parametrize("api_version", [None, "v1", "v1beta"])
def test_scores_are_parsed_on_any_api_version(srv, api_version):
    options = (
        {"backoff_base_s": 0.01, "api_version": api_version}
        if api_version
        else {"backoff_base_s": 0.01}
    )
    judge = build(spec(srv, options=options), "judge", cache=False)
    out = run_sync(
        judge.judge([JudgeRequest("q", "3.50", "3.5"), JudgeRequest("q", "red", "blue")])
    )
    assert [r.score for r in out] == [1.0, 0.0]
    assert srv.counts["gemini"] == 2


def test_429_then_success_is_retried(srv):
    srv.script = ["429"]
    judge = build(spec(srv), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q", "a", "a")]))
    assert r.score == 1.0
    assert srv.requests == 2 and judge.usage()["judge"]["retries"] == 1


def test_invalid_json_answer_is_a_failure_even_though_parsed_is_silently_none(srv):
    judge = build(spec(srv), "judge", cache=False)
    out = run_sync(judge.judge([JudgeRequest("q [[fault:badjson]]", "a", "a")]))
    assert out[0].score is None
    assert out[0].error.startswith("malformed-json") and "the score is high" in out[0].error
    assert srv.requests == 1


def test_malformed_body_is_a_failure(srv):
    judge = build(spec(srv), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q [[fault:malformed]]", "a", "a")]))
    assert r.score is None and r.error.startswith("malformed-response")


def test_hung_request_times_out(srv):
    judge = build(spec(srv, timeout_s=0.3, max_retries=0), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q [[fault:hang]]", "a", "a")]))
    assert r.score is None and r.error.startswith("timeout")


def test_server_errors_beyond_retries_fail_with_their_status(srv):
    judge = build(spec(srv, max_retries=1), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q [[fault:503]]", "a", "a")]))
    assert r.error.startswith("http-503") and srv.requests == 2


def test_rerun_makes_zero_requests_and_resume_pays_the_rest(srv, tmp_path):
    srv.latency_s = 0.02
    path = tmp_path / "c.sqlite"
    reqs = [JudgeRequest(f"question {i}", "x", "x") for i in range(20)]

    judge_then_cancel(
        lambda: build(spec(srv, concurrency=2), "judge", cache=path), reqs, srv, after=10
    )
    with CallCache(path) as c:
        cached = c.stats()["entries"]
    assert 8 <= cached <= srv.requests
    srv.reset()
    run_sync(build(spec(srv), "judge", cache=path).judge(reqs))
    assert srv.requests == len(reqs) - cached
    srv.reset()
    out = run_sync(build(spec(srv), "judge", cache=path).judge(reqs))
    assert srv.requests == 0 and all(r.score == 1.0 for r in out)


def test_verifier_and_images(srv, tmp_path):
    ver = build(spec(srv), "verifier", cache=False)
    [v] = run_sync(ver.verify([VerifyRequest("q", "42%", "North: 24%")]))
    assert v.verdict == "wrong"
    img = tmp_path / "p.png"
    img.write_bytes(PNG)
    vqa = build(spec(srv), "vqa", cache=False)
    [a] = run_sync(vqa.answer([VQARequest("Question: colour?\nAnswer:", images=[str(img)])]))
    assert a.answer and srv.images == 1


def test_api_key_goes_in_the_header_and_nowhere_on_disk(srv, tmp_path, monkeypatch):
    key = "AIza-test-0123456789-never-write-me"
    monkeypatch.setenv("DDAI_TEST_GEMINI_KEY", key)
    cache = tmp_path / "calls.sqlite"
    judge = build(spec(srv, api_key_env="DDAI_TEST_GEMINI_KEY"), "judge", cache=cache)
    run_sync(judge.judge([JudgeRequest(f"q{i}", "a", "a") for i in range(3)]))
    CallCache(cache).close()
    assert key in srv.credentials
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert key.encode() not in p.read_bytes(), p
