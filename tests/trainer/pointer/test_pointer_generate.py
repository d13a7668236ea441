"""Candidate generation: counts per method, de-dup priority, recorded log-probabilities, and the
VQA evaluation through the local simulator and an OpenAI-compatible server."""

from __future__ import annotations

import json
import math
import re

import pytest
from support.backends import backend_toml
from support.fakes import FakeModelServer
from support.lazy import heavy, torch

from ddai.pipelines.backends import BackendSpec, VQAResult, build
from ddai.pipelines.pointer.embed import EmbedConfig, run_embed
from ddai.pipelines.pointer.store import load_store
from ddai.pipelines.pointer.world import WorldConfig, make_world, read_jsonl, write_world
from ddai.pipelines.store import manifest

generate = heavy("ddai.trainer.pointer.generate")
pointer_model = heavy("ddai.trainer.pointer.model")


def _model(d=8, seed=0):
    torch.manual_seed(seed)
    return pointer_model.PointerSelector(pointer_model.PointerConfig(d_in=d, d_model=16)).eval()


def _inputs(n, k, d=8):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, d, generator=g), torch.randn(n, k, d, generator=g)


def test_counts_per_method_without_collisions():
    # a uniform policy (all weights 0) over 60 candidates: 1770 unordered pairs, so 13 draws per
    # query rarely collide
    model = _model()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    q, c = _inputs(20, 60)
    cfg = generate.ProposalConfig(
        num_beams=5, temperatures=(0.7, 1.0, 1.3), n_per_temp=2, num_random=2, seed=3
    )
    out = generate.propose(model, q, c, cfg)
    for cands in out:
        keys = [tuple(sorted(x.pointer)) for x in cands]
        assert len(keys) == len(set(keys))
    counts = [[x.gen_method for x in cands] for cands in out]
    full = [m for m in counts if len(m) == 13]
    assert len(full) >= 15  # most queries keep all 13
    for m in full:
        assert (m.count("beam"), m.count("sample"), m.count("random")) == (5, 6, 2)
        assert [x for x in m if x == "sample"] == ["sample"] * 6
    beams = [x for x in out[0] if x.gen_method == "beam"]
    assert [x.beam_rank for x in beams] == [0, 1, 2, 3, 4]
    assert all(x.beam_score == pytest.approx(-math.log(60 * 59), abs=1e-4) for x in beams)
    temps = [x.temperature for x in out[full_at(counts)] if x.gen_method == "sample"]
    assert temps == [0.7, 0.7, 1.0, 1.0, 1.3, 1.3]


def full_at(counts: list[list[str]]) -> int:
    return next(i for i, m in enumerate(counts) if len(m) == 13)


def test_samples_that_repeat_a_beam_are_recorded_as_the_beam():
    q, c = _inputs(6, 8)
    # τ = 0.01 samples the greedy pair, which is beam 0: every sample collapses into the beam
    cfg = generate.ProposalConfig(num_beams=3, temperatures=(0.01,), n_per_temp=4, num_random=0)
    out = generate.propose(_model(), q * 5, c * 5, cfg)
    for cands in out:
        assert {x.gen_method for x in cands} == {"beam"}
        assert [x.beam_rank for x in cands] == sorted(x.beam_rank for x in cands)


def test_recorded_logprobs_are_the_models_own():
    model = _model()
    q, c = _inputs(8, 10)
    out = generate.propose(
        model, q, c, generate.ProposalConfig(num_beams=4, n_per_temp=3, num_random=3, seed=1)
    )
    for i, cands in enumerate(out):
        for x in cands:
            ptr = torch.tensor([x.pointer])
            with torch.no_grad():
                own = model.sequence_log_prob(q[i : i + 1], c[i : i + 1], ptr).item()
            assert x.logprob_score == pytest.approx(own, abs=1e-5)  # log π_old at τ = 1
            if x.gen_method == "beam":
                assert x.beam_score == pytest.approx(own, abs=1e-5) and x.gen_logprob is None
            elif x.gen_method == "sample":
                with torch.no_grad():
                    tempered = model.sequence_log_prob(
                        q[i : i + 1], c[i : i + 1], ptr, temperature=x.temperature
                    )
                assert x.gen_logprob == pytest.approx(tempered.item(), abs=1e-5)
            else:
                assert x.gen_logprob == pytest.approx(-math.log(10 * 9))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    write_world(make_world(WorldConfig(seed=2, n_queries=24, n_demos=60)), root / "world")
    run_embed(
        EmbedConfig(world=root / "world", out=root / "store.safetensors", k=8, progress=False)
    )
    pointer_model.save_pointer(_model(d=32), root / "sft")
    return root


def _gen_cfg(root, out, **kw):
    return generate.GenConfig(
        store=root / "store.safetensors",
        world=root / "world",
        model=root / "sft",
        out=out,
        progress=False,
        **kw,
    )


def test_run_gen_records_correctness_for_every_candidate(tiny, tmp_path):
    out = tmp_path / "raw.jsonl"
    info = generate.run_gen(_gen_cfg(tiny, out))
    raw = read_jsonl(out)
    queries = {
        json.loads(x)["query_id"]: json.loads(x)
        for x in (tiny / "world" / "queries.jsonl").read_text().splitlines()
    }
    assert len(raw) == info["queries"] == sum(q["split"] == "train" for q in queries.values())
    store = load_store(tiny / "store.safetensors")
    for rec in raw:
        assert rec["candidate_pool"]["candidate_ids"] == store.cand_ids[store.row(rec["query_id"])]
        for cand in rec["pointer_candidates"]:
            assert cand["vqa_correct"] in (0, 1) and cand["eval_failed"] is False
            assert 0.0 <= cand["vqa_acc_score"] <= 1.0 and cand["vqa_pred_answer"]
            assert cand["vqa_correct"] == int(cand["vqa_acc_score"] >= 1.0)
    assert manifest.read(out)["notes"]["candidates"]["beam"] > 0
    assert info["vqa"] == "simulated" and manifest.read(out)["notes"]["vqa"] == "simulated"
    assert "skipped" in generate.run_gen(_gen_cfg(tiny, out))
    plan = generate.run_gen(_gen_cfg(tiny, tmp_path / "dry.jsonl", dry_run=True))
    assert plan["to_call"] == plan["candidates"] > 0 and not (tmp_path / "dry.jsonl").exists()


def _first_example_answer(prompt: str) -> str:
    """A stand-in VLM: copies the first demonstration's answer."""
    return re.search(r"^Answer: (.+)$", prompt, flags=re.MULTILINE).group(1)


def test_run_gen_through_an_openai_compatible_server(tiny, tmp_path):
    with FakeModelServer(responder=_first_example_answer, retry_after_s=0.0) as srv:
        spec = BackendSpec(
            name="vlm", kind="openai", model="fake-vlm", base_url=srv.openai_base_url, timeout_s=5.0,
            max_retries=1, concurrency=4, options={"backoff_base_s": 0.01},
        )  # fmt: skip
        vqa = build(spec, "vqa", cache=False)
        out = tmp_path / "raw.jsonl"
        info = generate.run_gen(
            _gen_cfg(
                tiny, out, proposal=generate.ProposalConfig(num_beams=2, n_per_temp=1, num_random=1)
            ),
            vqa_model=vqa,
        )
        calls = srv.requests
    assert info["vqa"] == "vlm" and "vqa_note" not in info
    raw = read_jsonl(out)
    demos = {
        json.loads(x)["demo_id"]: json.loads(x)
        for x in (tiny / "world" / "demos.jsonl").read_text().splitlines()
    }
    n = 0
    for rec in raw:
        pool = rec["candidate_pool"]["candidate_ids"]
        for cand in rec["pointer_candidates"]:
            assert cand["vqa_pred_answer"] == demos[pool[cand["pointer"][0]]]["answer"]
            n += 1
    assert calls == n


def test_failed_calls_are_kept_with_a_reason(tiny, tmp_path):
    class Flaky:
        name = "flaky"

        async def answer(self, reqs):
            return [
                VQAResult(None, "http 503") if i % 2 else VQAResult("2") for i in range(len(reqs))
            ]

    out = tmp_path / "raw.jsonl"
    info = generate.run_gen(_gen_cfg(tiny, out), vqa_model=Flaky())
    cands = [c for rec in read_jsonl(out) for c in rec["pointer_candidates"]]
    failed = [c for c in cands if c["eval_failed"]]
    assert info["eval_failed"] == len(failed) == len(cands) // 2
    assert all(c["eval_error"] == "http 503" and c["vqa_correct"] is None for c in failed)


def test_pointer_gen_exits_1_when_vqa_calls_failed(tiny, tmp_path, monkeypatch):
    """Every command that calls models exits 1 when calls failed: ``pointer gen`` against a VQA
    server that is down names the failures by reason."""
    from typer.testing import CliRunner

    from ddai.cli.app import app

    down = {"model": "nobody", "api_key_env": "DDAI_PTR_KEY", "max_retries": 0, "timeout_s": 2}
    cfg = backend_toml(tmp_path, "down", "http://127.0.0.1:9/v1", **down)
    monkeypatch.setenv("DDAI_CONFIG", str(cfg))
    monkeypatch.setenv("DDAI_PTR_KEY", "k")
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))  # a fresh call cache
    out = tmp_path / "raw.jsonl"
    res = CliRunner().invoke(
        app,
        ["pointer", "gen", "--store", str(tiny / "store.safetensors"), "--world",
         str(tiny / "world"), "--model", str(tiny / "sft"), "--out", str(out), "--split", "test",
         "--num-beams", "1", "--temps", "1.0", "--n-per-temp", "1", "--num-random", "1",
         "--vqa", "down", "--no-progress", "--json"],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    failed = data["failed_calls"]
    assert failed and sum(failed.values()) == data["eval_failed"] > 0
    cands = [c for rec in read_jsonl(out) for c in rec["pointer_candidates"]]
    assert all(c["eval_failed"] and c["vqa_correct"] is None for c in cands)


def test_rerun_after_failed_vqa_calls_reports_them_and_retry_failed_calls_again(
    tiny, tmp_path, monkeypatch
):
    """An output written with failed calls is not a clean skip: the rerun repeats the failures
    (exit 1), and ``--retry-failed``, which the error message tells the user to use, calls the
    model again instead of skipping the unchanged output."""
    from typer.testing import CliRunner

    from ddai.cli.app import app

    down = {"model": "nobody", "api_key_env": "DDAI_PTR_KEY", "max_retries": 0, "timeout_s": 2}
    monkeypatch.setenv(
        "DDAI_CONFIG", str(backend_toml(tmp_path, "down", "http://127.0.0.1:9/v1", **down))
    )
    monkeypatch.setenv("DDAI_PTR_KEY", "k")
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    out = tmp_path / "raw.jsonl"
    args = ["pointer", "gen", "--store", str(tiny / "store.safetensors"), "--world",
            str(tiny / "world"), "--model", str(tiny / "sft"), "--out", str(out), "--split",
            "test", "--num-beams", "1", "--temps", "1.0", "--n-per-temp", "1", "--num-random",
            "1", "--vqa", "down", "--no-progress", "--json"]  # fmt: skip
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 1, first.output
    failed = json.loads(first.stdout)["failed_calls"]
    written = manifest.read(out)["created"]

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 1, again.output
    data = json.loads(again.stdout)
    assert "skipped" in data and data["failed_calls"] == failed

    retried = CliRunner().invoke(app, [*args, "--retry-failed"])
    assert retried.exit_code == 1, retried.output
    data = json.loads(retried.stdout)
    assert "skipped" not in data and data["failed_calls"] == failed
    calls = manifest.read(out)["backend_calls"]["pointer.vqa"]
    assert calls["cached_failures"] == 0 and calls["attempts"] == sum(failed.values())
    assert manifest.read(out)["created"] >= written


def test_pointer_gen_with_a_keyless_remote_vqa_exits_2_naming_the_key_and_the_local_default(
    tiny, tmp_path, monkeypatch
):
    """A remote VQA backend whose key variable is unset fails every call: the command refuses
    it up front (exit 2) naming the variable and the local default, and writes nothing; its
    dry run, which calls nothing, still counts."""
    from typer.testing import CliRunner

    from ddai.cli.app import app

    cfg = tmp_path / "ddai.toml"
    cfg.write_text(
        '[backends.oai]\nkind = "openai"\nmodel = "gpt-x"\napi_key_env = "DDAI_PTR_UNSET_KEY"\n'
    )
    monkeypatch.setenv("DDAI_CONFIG", str(cfg))
    monkeypatch.delenv("DDAI_PTR_UNSET_KEY", raising=False)
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    out = tmp_path / "raw.jsonl"
    args = ["pointer", "gen", "--store", str(tiny / "store.safetensors"), "--world",
            str(tiny / "world"), "--model", str(tiny / "sft"), "--out", str(out), "--split",
            "test", "--num-beams", "1", "--temps", "1.0", "--n-per-temp", "1", "--num-random",
            "1", "--vqa", "oai", "--no-progress"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "$DDAI_PTR_UNSET_KEY" in text and "--vqa local" in text, text
    assert not out.exists()
    dry = CliRunner().invoke(app, [*args, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["to_call"] > 0


def test_the_default_proposal_draws_the_seeds_8_to_12_pointers_per_query():
    """Seed 002 §1.4: 3~5 beams, 2~3 samples per temperature, 1~2 random pairs, "8~12 pointer
    sequences per query in all"; §1.2.1 and §6 sample at τ 0.7, 1.0, 1.3, §3.2's call draws
    5 beams, 2 per temperature and 1 random pair."""
    cfg = generate.ProposalConfig()
    assert (cfg.num_beams, cfg.temperatures, cfg.n_per_temp, cfg.num_random) == (
        5, (0.7, 1.0, 1.3), 2, 1,
    )  # fmt: skip
    drawn = cfg.num_beams + len(cfg.temperatures) * cfg.n_per_temp + cfg.num_random
    assert 8 <= drawn <= 12
    # propose draws exactly that many per query before de-duplication (a uniform policy over
    # 60 candidates rarely repeats a pair)
    model = _model()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    out = generate.propose(model, *_inputs(20, 60), cfg)
    assert max(len(cands) for cands in out) == drawn
