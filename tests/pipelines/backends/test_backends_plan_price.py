"""A dry run's cost: a remote backend with no price set is "not priced" (``est_cost_usd`` None and
a note naming the price fields), not $0, which reads as free; a priced one gives the number; a
local one is free (0)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cli_schemas import check
from support.funnel_data import write_dataset
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.backends import BackendSpec, JudgeRequest, build
from ddai.pipelines.backends.config import spec_from_table
from ddai.pipelines.funnel.verify_gt import VerifyConfig, run_verify
from ddai.pipelines.pages.corpus import Corpus

DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a dry run calls nothing
REQS = [JudgeRequest("How many?", "1,000", "1000"), JudgeRequest("Who?", "Alice", "Bob")]


def _remote(kind: str = "openai", **kw) -> BackendSpec:
    return BackendSpec(name="api", kind=kind, model="m", base_url=DEAD, **kw)


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_an_unpriced_remote_plan_is_not_priced_and_says_how_to_price_it(kind):
    plan = build(_remote(kind), "judge", cache=False).plan(REQS)
    assert plan["to_call"] == 2 and plan["est_input_tokens"] > 0
    assert plan["est_cost_usd"] is None
    note = plan["cost_note"]
    assert note.startswith("not priced: backend 'api' sets no price")
    assert "price_in_per_mtok" in note and "price_out_per_mtok" in note
    assert "[backends.api]" in note


def test_a_priced_remote_plan_gives_the_number():
    plan = build(_remote(price_in_per_mtok=2.0, price_out_per_mtok=8.0), "judge", cache=False).plan(
        REQS
    )
    tokens_in, tokens_out = plan["est_input_tokens"], plan["est_output_tokens"]
    assert plan["est_cost_usd"] == round((tokens_in * 2.0 + tokens_out * 8.0) / 1e6, 6) > 0
    assert "cost_note" not in plan
    # a price written as 0 (a free server of one's own) is a price: 0, no note
    free = build(_remote(price_in_per_mtok=0.0), "judge", cache=False).plan(REQS)
    assert free["est_cost_usd"] == 0.0 and "cost_note" not in free


def test_a_local_plan_is_free():
    plan = build(BackendSpec(name="local", kind="local-judge"), "judge", cache=False).plan(REQS)
    assert plan["est_cost_usd"] == 0.0 and "cost_note" not in plan


def test_the_table_sets_the_price_or_leaves_it_unset():
    unset = spec_from_table("a", {"kind": "openai", "model": "m"})
    assert (unset.price_in_per_mtok, unset.price()) == (None, None)
    priced = spec_from_table("b", {"kind": "openai", "model": "m", "price_out_per_mtok": 2.5})
    assert (priced.price().in_per_mtok, priced.price().out_per_mtok) == (0.0, 2.5)


def _toml(tmp_path, monkeypatch):
    toml = tmp_path / "ddai.toml"
    toml.write_text(
        f'[backends.api]\nkind = "openai"\nmodel = "m"\nbase_url = "{DEAD}"\n', encoding="utf-8"
    )
    monkeypatch.setenv("DDAI_CONFIG", str(toml))


def test_judge_dry_run_on_an_unpriced_backend_says_not_priced(tmp_path, monkeypatch):
    _toml(tmp_path, monkeypatch)
    logs = tmp_path / "logs"
    row = {"uid": "u0", "question": "q", "reference_answer": "1", "answer": "1"}
    store.write_run(
        logs, "r1", [{**row, "rollout_idx": 0}, {**row, "rollout_idx": 1, "answer": "2"}]
    )
    args = ["judge", "--logs", str(logs), "--run", "r1", "--judge", "api", "--dry-run"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    check("judge", s)
    assert s["to_call"] == 2 and s["est_cost_usd"] is None
    assert "price_in_per_mtok" in s["cost_note"]


def test_verify_gt_dry_run_on_an_unpriced_verifier_says_not_priced(tmp_path, monkeypatch):
    _toml(tmp_path, monkeypatch)
    ds = write_dataset(tmp_path / "b0.parquet", ["train_1", "train_2"])
    corpus = tmp_path / "pages.parquet"
    Corpus.from_records([{"doc_id": d, "page": 2, "text": "x"} for d in "12"]).save(corpus)
    cfg = VerifyConfig(dataset=ds, out=tmp_path / "o", corpus=corpus, dry_run=True)
    unpriced = run_verify(replace(cfg, verifier="api"))
    assert unpriced.summary["verifier calls"] == 2
    assert unpriced.summary["estimated cost (USD)"] is None
    assert "[backends.api]" in unpriced.summary["cost note"]
    local = run_verify(replace(cfg, verifier="local"))
    assert local.summary["estimated cost (USD)"] == 0.0 and "cost note" not in local.summary
