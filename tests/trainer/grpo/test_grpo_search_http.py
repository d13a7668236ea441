"""GRPO steps whose search is a service over HTTP (the fake search service on 127.0.0.1), for each
wire protocol: the logged rollouts' pages are the pages the service returned, the service's query
counter matches the searches in the rollout log, and a service that answers 500 and then hangs
gives ``[System Error: …]`` observations and a step that still finishes.

The policy is a tiny model whose turns are scripted (teacher-forced, with their real log-probs),
so every episode searches twice with queries no other episode uses, then completes."""

from __future__ import annotations

import itertools
import json

import pytest
from support.fakes_search import FakeSearchServer
from support.toy_world import make_world, run_fields

from ddai.pipelines.records import metrics
from ddai.pipelines.store import read_rollouts
from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeBackends, EpisodeConfig, RewardOverrides
from ddai.trainer.episode.rollout import Sampler
from ddai.trainer.grpo import train as grpo
from ddai.trainer.grpo.train import GRPORunConfig, run_grpo

PAGES = toy.corpus().pages()
DONE = "<think>enough</think>\n<search_complete>true</search_complete>"


class ScriptedSampler(Sampler):
    """Two searches with fresh queries, then ``search_complete``; log-probs of those tokens
    under the model (one teacher-forced forward pass per context)."""

    counter = itertools.count()

    def __init__(self, model, tok):
        self.model, self.tok = model, tok

    def sample(self, contexts, max_new_tokens, images=None):
        import torch

        out = []
        for ctx, cap in zip(contexts, max_new_tokens, strict=True):
            turns = self.tok.decode(ctx).count("<|im_start|>assistant")
            text = f"<think>look</think>\n<search>q{next(self.counter)}</search>"
            text = DONE if turns >= 3 else text
            ids = self.tok.encode(text + self.tok.eos_token, add_special_tokens=False)[:cap]
            full = torch.tensor([ctx + ids])
            with torch.no_grad():
                logits = self.model(input_ids=full).logits[0, len(ctx) - 1 : -1].float()
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
            out.append((ids, lp.tolist()))
        return out


@pytest.fixture(scope="module")
def toy_setup(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("grpo-http"))


@pytest.fixture(autouse=True)
def scripted(monkeypatch):
    monkeypatch.setattr(
        grpo.SearchRollout,
        "_sampler",
        lambda self, trainer, model: ScriptedSampler(model, self.tok),
    )


def run(root, data, tiny, name, url, protocol, monkeypatch, skip_preflight=True, **table):
    lines = [f'[backends.svc]\nkind = "search-http"\nurl = "{url}"\nprotocol = "{protocol}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    (root / name).mkdir()
    (root / name / "ddai.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.chdir(root / name)
    result = run_grpo(
        GRPORunConfig(
            **run_fields(tiny, data, root / name / "out", root / name / "logs", name),
            n_agent=2,
            batch_size=4,
            max_steps=1,
            learning_rate=1e-3,
            save_steps=10,
            # The preflight's own searches would add to the service's counters, which these tests
            # match against the rollout log; it is tested on its own below.
            skip_preflight=skip_preflight,
            episode=EpisodeConfig(
                max_turns=4, max_turn_tokens=24, max_completion_tokens=256, obs_max_tokens=16
            ),
            rewards=RewardOverrides(reward="ddai-phase1"),  # NDCG: no generator or judge needed
            backends=EpisodeBackends(search="svc"),
        )
    )
    return result, read_rollouts(root / name / "logs", runs=[name]).to_pylist()


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["ddai", "search-r1"])
def test_grpo_step_shows_the_services_pages(toy_setup, protocol, monkeypatch):
    root, data, tiny = toy_setup
    with FakeSearchServer(pages=PAGES, top_k=3) as srv:
        url = srv.ddai_url if protocol == "ddai" else srv.search_r1_url
        result, rows = run(
            root, data, tiny, f"ok_{protocol.replace('-', '')}", url, protocol, monkeypatch
        )
        answered = dict(srv.answered)
        assert result.steps == 1 and result.rollouts_logged == 4 and result.search_errors == 0
        searches = [t for r in rows for t in r["turns"] if t["action"] == "search"]
        assert len(searches) == 8  # two per episode
        # The counter matches the log: every search was one query at the service, no more.
        assert srv.queries == len(searches) == len(answered)
        assert srv.requests == 2  # one batched request per turn for the 4 episodes
        for r in rows:
            seen: list[str] = []
            for t in (t for t in r["turns"] if t["action"] == "search"):
                served = answered[t["arg"]]
                shown = next(p for p in served if p not in seen)
                assert t["retrieved"] == [shown] and t["observation"].startswith(f"[page {shown}]")
                seen.append(shown)
            assert r["retrieved_pages"] == metrics.dedupe(seen)
            assert r["ndcg"] == metrics.ndcg(r["retrieved_pages"], r["reference_pages"])
            assert json.loads(r["extra"])["search_errors"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["ddai", "search-r1"])
def test_a_failing_service_gives_system_errors_and_the_step_finishes(
    toy_setup, protocol, monkeypatch
):
    root, data, tiny = toy_setup
    script = ["500", "500", "hang", "hang"]  # turn 1: 500 twice; turn 2: hangs twice
    with FakeSearchServer(pages=PAGES, script=script, hang_s=20) as srv:
        url = srv.ddai_url if protocol == "ddai" else srv.search_r1_url
        result, rows = run(
            root, data, tiny, f"bad_{protocol.replace('-', '')}", url, protocol, monkeypatch,
            timeout_s=0.5, max_retries=1, backoff_base_s=0.01,
        )  # fmt: skip
        assert result.steps == 1 and result.rollouts_logged == 4 and result.search_errors == 8
        assert srv.requests == 4 and srv.faults == {"500": 2, "hang": 2}
        obs = [t["observation"] for r in rows for t in r["turns"] if t["action"] == "search"]
        assert len(obs) == 8
        assert (
            obs.count(
                "[System Error: Search failed (http-500). Please try again or use a different query.]"
            )
            == 4
        )
        assert (
            obs.count(
                "[System Error: Search failed (timeout). Please try again or use a different query.]"
            )
            == 4
        )
        for r in rows:
            assert r["retrieved_pages"] == [] and r["ndcg"] == 0.0
            assert json.loads(r["extra"])["search_errors"] == 2
            assert r["terminated"] == "complete"


@pytest.mark.parametrize("protocol", ["ddai", "search-r1"])
def test_preflight_refuses_a_failing_service_before_loading_the_model(
    toy_setup, protocol, monkeypatch
):
    from ddai.trainer.episode.preflight import PreflightError

    root, data, tiny = toy_setup
    with FakeSearchServer(pages=PAGES, script=["500"] * 4) as srv:
        url = srv.ddai_url if protocol == "ddai" else srv.search_r1_url
        with pytest.raises(PreflightError, match=r"\[search\].*http-500"):
            run(
                root, data, tiny, f"pf_{protocol.replace('-', '')}", url, protocol, monkeypatch,
                skip_preflight=False, max_retries=1, backoff_base_s=0.01,
            )  # fmt: skip
        assert srv.requests == 2  # one question, one retry; then the run stops
    assert not (root / f"pf_{protocol.replace('-', '')}" / "out").exists()


def test_a_search_service_without_url_exits_2_before_training(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ddai.cli.app import app

    data = toy.write_toy(tmp_path / "toy")
    (tmp_path / "ddai.toml").write_text('[backends.svc]\nkind = "search-http"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = ["train", "grpo", "--model", str(tmp_path / "no-model"), "--data"]
    args += [str(data / "dataset.parquet"), "--corpus", str(data / "pages.parquet")]
    args += ["--out", str(tmp_path / "out"), "--search", "svc", "--reward", "ddai-phase1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "needs `url`" in res.output and not (tmp_path / "out").exists()
