"""A remote backend with no price: ``--max-cost`` cannot stop it (every call would count $0), so
it is refused before any call, naming the price fields to set."""

from __future__ import annotations

import pytest
from support.fakes import FakeModelServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.backends import BackendSpec, build
from ddai.pipelines.backends.config import ConfigError

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
    """A ddai.toml with the same fake OpenAI judge twice: ``bare`` sets no price, ``priced`` does."""
    with FakeModelServer() as srv:
        base = f'kind = "openai"\nmodel = "fake-judge"\nbase_url = "{srv.openai_base_url}"\n'
        cfg = tmp_path / "ddai.toml"
        cfg.write_text(
            f"[backends.bare]\n{base}\n[backends.priced]\n{base}"
            "price_in_per_mtok = 1.0\nprice_out_per_mtok = 2.0\n",
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
