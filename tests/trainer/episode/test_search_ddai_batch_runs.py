"""``collect`` and ``train grpo`` against a search service written to DDAI's trainer contract
(AGENTS.md "Search API contract": ``POST`` of ``[{"query", "id", "request_idx"}]``, answers by
``request_idx``): every search goes out with the document number DDAI derives from the prompt's uid
(``train_3`` → ``3``) and every query gets pages, all of them its own document's."""

from __future__ import annotations

import json

import pytest
from support.fake_vllm import FakeVLLMServer
from support.fakes_search import FakeSearchServer
from test_collect import collect_args
from test_collect import world as world
from test_grpo_search_http import PAGES, ScriptedSampler, run
from test_grpo_search_http import toy_setup as toy_setup
from test_vllm_server import responder
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts
from ddai.trainer.grpo import train as grpo


def searches_by_doc(rows):
    """Per rollout: the document its uid names and the pages its searches showed."""
    out = []
    for r in rows:
        doc = r["uid"].rsplit("_", 1)[1]
        shown = [t["retrieved"] for t in r["turns"] if t["action"] == "search"]
        out.append((doc, shown))
    return out


def test_collect_searches_each_prompts_own_document(world, tmp_path, monkeypatch):
    root, data, tiny, tok = world
    with (
        FakeSearchServer(pages=PAGES, top_k=3) as srv,
        FakeVLLMServer(responder(tok), model="served-policy", decode=tok.decode) as policy,
    ):
        (tmp_path / "ddai.toml").write_text(
            f'[backends.pol]\nkind = "openai"\nmodel = "served-policy"\n'
            f'base_url = "{policy.url}/v1"\n\n'
            f'[backends.svc]\nkind = "search-http"\nurl = "{srv.ddai_url}"\n'
            'protocol = "ddai-batch"\ntimeout_s = 5\n',
            encoding="utf-8",
        )
        monkeypatch.chdir(tmp_path)
        args = [*collect_args(root, data, tiny, "batchproto"), "--generate-via", "pol"]
        res = CliRunner().invoke(app, [*args, "--search", "svc"])
        assert res.exit_code == 0, res.output
        answered = list(srv.batch_answered)
    rows = read_rollouts(root / "logs", ["batchproto"]).to_pylist()
    assert len(rows) == 6
    # Every prompt's searches went out with its document (the uid's number), and only those.
    assert sorted({doc for _, doc, _ in answered}) == ["1", "2", "3"]
    for _, doc, pages in answered:
        assert pages and all(p.startswith(f"{doc}_") for p in pages)
    for doc, shown in searches_by_doc(rows):
        assert shown and all(s and s[0].startswith(f"{doc}_") for s in shown), (doc, shown)
    assert sum(json.loads(r["extra"])["search_errors"] for r in rows) == 0


@pytest.mark.slow
def test_grpo_searches_each_prompts_own_document(toy_setup, monkeypatch):
    root, data, tiny = toy_setup
    monkeypatch.setattr(  # scripted turns: two fresh queries, then search_complete
        grpo.SearchRollout,
        "_sampler",
        lambda self, trainer, model: ScriptedSampler(model, self.tok),
    )
    with FakeSearchServer(pages=PAGES, top_k=3) as srv:
        result, rows = run(root, data, tiny, "ok_batch", srv.ddai_url, "ddai-batch", monkeypatch)
        answered = list(srv.batch_answered)
    assert result.steps == 1 and result.rollouts_logged == 4 and result.search_errors == 0
    searches = [t for r in rows for t in r["turns"] if t["action"] == "search"]
    assert len(searches) == 8 and len(answered) == 8  # fresh queries: one each at the service
    sent = {q: (doc, pages) for q, doc, pages in answered}
    for doc, shown in searches_by_doc(rows):
        assert len(shown) == 2
        for page in shown:
            assert page and page[0].startswith(f"{doc}_")
    for r in rows:
        doc = r["uid"].rsplit("_", 1)[1]
        for t in (t for t in r["turns"] if t["action"] == "search"):
            assert sent[t["arg"]][0] == doc and t["retrieved"][0] in sent[t["arg"]][1]


def test_preflight_asks_health_and_searches_each_tasks_document():
    from ddai.pipelines.backends import get_backend
    from ddai.trainer.episode.preflight import PreflightReport, check_search
    from ddai.trainer.episode.tasks import Task

    tasks = [
        Task(uid=f"train_{d}", messages=(), question="q", reference_pages=(f"{d}_1",))
        for d in (1, 2)
    ]
    for health, ok in (("healthy", True), ("503", False)):
        with FakeSearchServer(pages=PAGES, top_k=2, health=health) as srv:
            cfg = {"backends": {"svc": {"kind": "search-http", "url": srv.ddai_url}}}
            cfg["backends"]["svc"]["protocol"] = "ddai-batch"
            report = PreflightReport()
            check_search(report, tasks, get_backend("search", "svc", config=cfg), k=2)
            assert srv.health_requests == 1
            if ok:
                assert report.errors == [] and report.checks["search"]["with_golden_hit"] == 2
                assert [doc for _, doc, _ in srv.batch_answered] == ["1", "2"]
            else:
                (err,) = report.errors
                assert f"GET {srv.url}/health answered HTTP 503" in err.message
                assert srv.queries == 0
