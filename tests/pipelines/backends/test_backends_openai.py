"""The OpenAI backend through the real ``openai`` SDK against the fake server (no key, no network)."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.backends import PNG_1PX, judge_then_cancel, quick_spec
from support.fakes import FakeModelServer

from ddai.pipelines.backends import (
    BackendSpec,
    GenerateRequest,
    JudgeRequest,
    RewriteRequest,
    VerifyRequest,
    VQARequest,
    build,
    run_sync,
)
from ddai.pipelines.backends.cache import CallCache

PNG = PNG_1PX


def spec(srv: FakeModelServer, api: str = "chat", **kw) -> BackendSpec:
    kw = {"options": {"api": api, "backoff_base_s": 0.01}} | kw
    return quick_spec("oai", "openai", "fake-judge", srv.openai_base_url, **kw)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_scores_are_parsed(srv, api, tmp_path):
    judge = build(spec(srv, api), "judge", cache=tmp_path / "c.sqlite")
    out = run_sync(
        judge.judge(
            [
                JudgeRequest("How many?", "1,000", "1000"),  # the fake judge normalizes: 1
                JudgeRequest("Who?", "Alice", "Bob"),  # 0
            ]
        )
    )
    assert [r.score for r in out] == [1.0, 0.0]
    assert [r.reason for r in out] == ["match", "differs"]
    assert srv.counts[api] == 2
    usage = judge.usage()["judge"]
    assert usage["ok"] == 2 and usage["input_tokens"] > 0 and usage["output_tokens"] > 0


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_429_then_success_is_retried(srv, api):
    srv.script = ["429", "429"]
    judge = build(spec(srv, api), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q", "a", "a")]))
    assert r.score == 1.0 and r.error is None
    assert srv.requests == 3 and srv.faults["429"] == 2
    assert judge.usage()["judge"]["retries"] == 2


def test_500_burst_beyond_the_retries_is_a_failure_with_reason(srv):
    srv.script = ["500", "503", "500"]
    judge = build(spec(srv, max_retries=2), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q", "a", "a")]))
    assert r.score is None and r.error.startswith("http-500")
    assert srv.requests == 3


@pytest.mark.parametrize("fault", ["badjson", "malformed"])
def test_malformed_json_is_a_failure_with_reason_not_a_zero(srv, fault):
    judge = build(spec(srv), "judge", cache=False)
    out = run_sync(
        judge.judge([JudgeRequest(f"q [[fault:{fault}]]", "a", "a"), JudgeRequest("q", "a", "a")])
    )
    assert out[0].score is None
    reason = "malformed-json" if fault == "badjson" else "malformed-response"
    assert out[0].error.startswith(reason)
    assert out[1].score == 1.0
    # Not retryable: asked once.
    assert srv.requests == 2


def test_an_answer_with_empty_choices_is_a_failure_that_says_so(srv):
    judge = build(spec(srv), "judge", cache=False)
    out = run_sync(
        judge.judge([JudgeRequest("q [[fault:nochoices]]", "a", "a"), JudgeRequest("q", "a", "a")])
    )
    assert out[0].score is None
    assert out[0].error.startswith("no-choices: the server answered with an empty `choices` list")
    assert "IndexError" not in out[0].error
    assert out[1].score == 1.0
    assert srv.requests == 2  # not retried


def test_hung_request_times_out(srv):
    judge = build(spec(srv, timeout_s=0.3, max_retries=1), "judge", cache=False)
    t0 = time.perf_counter()
    [r] = run_sync(judge.judge([JudgeRequest("q [[fault:hang]]", "a", "a")]))
    assert r.score is None and r.error.startswith("timeout")
    assert srv.requests == 2  # the first attempt and one retry, both hung
    assert time.perf_counter() - t0 < 10  # the server would hang for 30 s


def test_rerun_makes_zero_requests(srv, tmp_path):
    reqs = [JudgeRequest(f"q{i}", str(i), str(i % 2)) for i in range(12)]
    judge = build(spec(srv), "judge", cache=tmp_path / "c.sqlite")
    first = run_sync(judge.judge(reqs))
    assert srv.requests == 12
    again = build(spec(srv), "judge", cache=tmp_path / "c.sqlite")
    second = run_sync(again.judge(reqs))
    assert srv.requests == 12
    assert second == first
    assert again.usage()["judge"]["cache_hits"] == 12


def test_cancel_halfway_then_resume_pays_only_for_the_rest(srv, tmp_path):
    srv.latency_s = 0.03
    reqs = [JudgeRequest(f"question {i}", "x", "x") for i in range(30)]
    path = tmp_path / "c.sqlite"

    judge_then_cancel(
        lambda: build(spec(srv, concurrency=3), "judge", cache=path), reqs, srv, after=15
    )
    paid_first = srv.requests
    with CallCache(path) as c:
        cached = c.stats()["entries"]
    assert 12 <= cached <= paid_first
    srv.reset()
    out = run_sync(build(spec(srv), "judge", cache=path).judge(reqs))
    assert all(r.score == 1.0 for r in out)
    assert srv.requests == len(reqs) - cached


def test_images_are_sent_as_data_urls(srv, tmp_path):
    img = tmp_path / "page.png"
    img.write_bytes(PNG)
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    for api in ("chat", "responses"):
        srv.reset()
        vqa = build(spec(srv, api), "vqa", cache=False)
        req = VQARequest(
            "Question: what colour?\nAnswer:",
            images=[str(img)],
            examples=[{"question": "q", "answer": "a", "images": [data_url]}],
        )
        [r] = run_sync(vqa.answer([req]))
        assert r.answer and r.error is None
        assert srv.images == 2


def test_missing_image_fails_that_item_only(srv):
    vqa = build(spec(srv), "vqa", cache=False)
    out = run_sync(
        vqa.answer(
            [VQARequest("Question: a?", images=["/nonexistent.png"]), VQARequest("Question: b?")]
        )
    )
    assert out[0].answer is None and out[0].error.startswith("bad-input")
    assert out[1].answer == "?b"  # the fake model answers the question's first word reversed
    assert srv.requests == 1


def test_other_roles_parse_their_outputs(srv):
    gen = build(spec(srv), "generator", cache=False)
    [g] = run_sync(
        gen.generate([GenerateRequest("Revenue in 2019?", ["1_2"], ["Revenue 2019: 42"])])
    )
    assert g.answer == "euneveR"  # the fake model: the question's first word reversed
    rw = build(spec(srv), "rewriter", cache=False)
    [w] = run_sync(rw.rewrite([RewriteRequest(["find the slide", "read the value"], "q")]))
    assert w.thinks == ["Plan: find the slide", "Plan: read the value"]
    ver = build(spec(srv), "verifier", cache=False)
    out = run_sync(
        ver.verify(
            [VerifyRequest("q", "42%", "North: 42%"), VerifyRequest("q", "17", "North: 42%")]
        )
    )
    assert [v.verdict for v in out] == ["ok", "wrong"]


def test_rewriter_count_mismatch_is_a_failure(srv):
    srv.responder = lambda text: '{"thinks": ["only one"]}'
    try:
        rw = build(spec(srv), "rewriter", cache=False)
        [w] = run_sync(rw.rewrite([RewriteRequest(["a", "b"])]))
    finally:
        from support.fakes import default_responder

        srv.responder = default_responder
    assert w.thinks is None and w.error.startswith("think-count")


def test_cost_is_accounted_from_the_price_table(srv):
    judge = build(spec(srv, price_in_per_mtok=2.0, price_out_per_mtok=8.0), "judge", cache=False)
    run_sync(judge.judge([JudgeRequest("q", "a", "a")]))
    u = judge.usage()["judge"]
    assert u["cost_usd"] == pytest.approx(
        (u["input_tokens"] * 2.0 + u["output_tokens"] * 8.0) / 1e6
    )


def test_missing_key_for_the_real_service_is_a_clear_failure(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = build(BackendSpec(name="real", kind="openai", model="gpt"), "judge", cache=False)
    [r] = run_sync(judge.judge([JudgeRequest("q", "a", "a")]))
    assert r.error.startswith("no-key") and "OPENAI_API_KEY" in r.error


def test_ping_lists_models(srv):
    result = run_sync(build(spec(srv), "judge", cache=False).ping())
    assert result["ok"] and result["detail"] == "1 models; fake-judge not listed"


def test_api_key_never_reaches_a_file(srv, tmp_path, monkeypatch):
    key = "sk-test-9f8e7d6c5b4a-never-write-me"
    monkeypatch.setenv("DDAI_TEST_OPENAI_KEY", key)
    cache = tmp_path / "cache" / "calls.sqlite"
    srv.script = ["429"]
    judge = build(spec(srv, api_key_env="DDAI_TEST_OPENAI_KEY"), "judge", cache=cache)
    run_sync(
        judge.judge(
            [JudgeRequest(f"q{i}", "a", "b") for i in range(5)]
            + [JudgeRequest("q [[fault:badjson]]", "a", "a")]
        )
    )
    CallCache(cache).close()
    assert key in srv.credentials  # the key was really used
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written
    for p in written:
        assert key.encode() not in p.read_bytes(), p
    assert key not in repr(judge.usage())


KILL_SCRIPT = """
import sys
from ddai.pipelines.backends import BackendSpec, JudgeRequest, build, run_sync
spec = BackendSpec(name="oai", kind="openai", model="fake-judge", base_url=sys.argv[1], concurrency=3, timeout_s=5)
judge = build(spec, "judge", cache=sys.argv[2])
run_sync(judge.judge([JudgeRequest(f"question {i}", "x", "x") for i in range(int(sys.argv[3]))]))
"""


@pytest.mark.slow
def test_killed_process_resumes_paying_only_for_the_rest(srv, tmp_path):
    srv.latency_s = 0.05
    n = 40
    path = tmp_path / "c.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, srv.openai_base_url, str(path), str(n)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.time() + 60
    while srv.requests < n // 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    paid_first = srv.requests
    assert n // 2 <= paid_first < n
    with CallCache(path) as c:
        cached = c.stats()["entries"]
    assert cached >= n // 2 - 6  # at most the in-flight calls (and a few ms of answers) are lost
    srv.reset()
    out = run_sync(
        build(spec(srv), "judge", cache=path).judge(
            [JudgeRequest(f"question {i}", "x", "x") for i in range(n)]
        )
    )
    assert all(r.score == 1.0 for r in out)
    assert srv.requests == n - cached
    assert Path(path).is_file()
