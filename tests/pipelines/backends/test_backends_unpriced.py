"""A remote backend with no price: ``--max-cost`` cannot stop it (every call would count $0), so
it is refused before any call, naming the price fields to set; and a real run's usage reports its
cost as null (unknown), not the $0 a missing price would add up to."""

from __future__ import annotations

import asyncio
import json

import pytest
from cli_schemas import check
from support.fakes import FakeModelServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.backends import BackendSpec, build
from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.engine import Engine, EngineSettings, Identity, Job, Outcome
from ddai.pipelines.backends.usage import Price, TokenUsage

runner = CliRunner()
DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a refusal calls nothing


def _rows() -> list[dict]:
    return [
        {
            "uid": f"u{i}",
            "rollout_idx": 0,
            "question": f"question {i}",
            "reference_answer": "1000",
            "answer": a,
            "judge_score": None,
            "extra": "{}",
        }
        for i, a in enumerate(["1000", "900"])
    ]


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A ddai.toml with two fake OpenAI judges: ``bare`` sets no price, ``priced`` does."""
    with FakeModelServer() as srv:
        base = f'kind = "openai"\nbase_url = "{srv.openai_base_url}"\n'
        cfg = tmp_path / "ddai.toml"
        cfg.write_text(  # two models, so neither answers from the other's cache
            f'[backends.bare]\n{base}model = "fake-a"\n\n[backends.priced]\n{base}'
            'model = "fake-b"\nprice_in_per_mtok = 1.0\nprice_out_per_mtok = 2.0\n',
            encoding="utf-8",
        )
        monkeypatch.setenv("DDAI_CONFIG", str(cfg))
        yield srv


@pytest.fixture
def logs(tmp_path):
    path = tmp_path / "logs"
    store.write_run(path, "r1", _rows())
    return path


def test_judge_max_cost_on_an_unpriced_backend_is_refused_before_any_call(logs, server):
    args = ["judge", "--logs", str(logs), "--run", "r1", "--judge", "bare", "--max-cost", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert "--max-cost" in out and "not priced" in out
    assert "price_in_per_mtok" in out and "[backends.bare]" in out
    assert server.requests == 0
    assert store.list_runs(logs) == ["r1"]
    # the same cap on the priced twin runs
    args[args.index("bare")] = "priced"
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert server.requests == 2


@pytest.mark.parametrize(
    ("kind", "role"),
    [
        ("openai", "judge"),
        ("openai", "rewriter"),
        ("openai", "verifier"),
        ("openai", "vetter"),
        ("openai", "vqa"),
        ("openai", "embedder"),
        ("gemini", "vqa"),
    ],
)
def test_every_backend_built_with_a_cap_refuses_an_unpriced_remote(kind, role):
    """``build`` is the path every step takes (``step_backend``, ``resolve_vqa``, pointer embed)."""
    spec = BackendSpec(name="api", kind=kind, model="m", base_url=DEAD)
    with pytest.raises(ConfigError) as e:
        build(spec, role, cache=False, max_cost=5.0)
    msg = str(e.value)
    assert "--max-cost" in msg and "[backends.api]" in msg and "price_out_per_mtok" in msg
    # no cap, a price (0 is one) or a local backend: built
    build(spec, role, cache=False)
    build(
        BackendSpec(name="api", kind=kind, model="m", base_url=DEAD, price_in_per_mtok=0.0),
        role,
        cache=False,
        max_cost=5.0,
    )


def test_a_local_backend_with_a_cap_is_built():
    build(BackendSpec(name="local", kind="local-judge"), "judge", cache=False, max_cost=0.0)


def test_a_real_run_on_an_unpriced_backend_reports_its_cost_as_null(logs, server):
    base = ["judge", "--logs", str(logs), "--run", "r1", "--json"]
    res = runner.invoke(app, [*base, "--judge", "bare"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    check("judge", s)
    used = s["usage"]["ddai judge"]
    assert used["calls"] == 2 and used["input_tokens"] > 0
    assert used["cost_usd"] is None
    manifest = store.run_manifest(logs, "r1@bare")
    assert manifest["backend_calls"]["ddai judge"]["cost_usd"] is None
    # the priced twin: tokens times its price
    res = runner.invoke(app, [*base, "--judge", "priced", "--out-run", "p"])
    used = json.loads(res.output)["usage"]["ddai judge"]
    want = (used["input_tokens"] * 1.0 + used["output_tokens"] * 2.0) / 1e6
    assert used["cost_usd"] == pytest.approx(want, abs=1e-6) and used["cost_usd"] > 0


def _engine(price: Price | None) -> Engine:
    return Engine(
        Identity("api", "openai", "m", "judge"),
        EngineSettings(concurrency=1, timeout_s=5.0),
        classify=lambda e: None,
        price=price,
    )


def _job(key: str) -> Job:
    async def call() -> Outcome:
        return Outcome({"v": key}, TokenUsage(100, 10))

    return Job(key, call, TokenUsage(100, 10))


def test_the_ledger_cost_of_an_unpriced_engine_is_none_once_it_calls():
    eng = _engine(None)
    assert eng.ledger.site("t", "api", "m").to_dict()["cost_usd"] == 0.0  # nothing paid yet
    asyncio.run(eng.run([_job("a"), _job("b")], call_site="t"))
    site = eng.ledger.snapshot()["t"]
    assert (site["calls"], site["input_tokens"], site["cost_usd"]) == (2, 200, None)
    priced = _engine(Price(1.0, 2.0))
    asyncio.run(priced.run([_job("a")], call_site="t"))
    assert priced.ledger.snapshot()["t"]["cost_usd"] == pytest.approx((100 + 20) / 1e6)
