"""``--vllm server``: generation through TRL's real ``VLLMClient`` against a local server that
speaks the vLLM/``trl vllm-serve`` HTTP protocol. Multi-turn episodes, sampling parameters and
stop tokens go over the wire; the rollouts (and in a GRPO run, the rollout log) are the server's
completions. Only the GPU weight-transfer transport (NCCL) and the ``vllm`` import guard are
stubbed: vLLM itself cannot be installed on a CPU machine."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from ddai.trainer import toy
from ddai.trainer.data import load_tasks
from ddai.trainer.env import EnvConfig, SearchEnv
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.rollout import RolloutConfig, VLLMServerSampler, run_rollouts, token_truncator
from ddai.trainer.tiny import TinySpec, build_tiny

from fake_vllm import FakeVLLMServer

SEARCH = "<think>look it up</think>\n<search>revenue</search>"
DONE = "<think>found it</think>\n<search_complete>true</search_complete>"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm")
    data = toy.write_toy(root / "toy")
    texts = [r["messages"] for r in toy.sft_rows()] + [SEARCH, DONE]
    tiny = build_tiny(root / "tiny", texts=texts, spec=TinySpec(hidden_size=32))
    return root, data, tiny, load_tokenizer(str(tiny))


def responder(tok):
    """Search on the first turn; complete once the context holds an observation. Both end with
    the eos token followed by junk, which the request's stop token must cut off."""
    first = tok.encode(SEARCH, add_special_tokens=False)
    second = tok.encode(DONE, add_special_tokens=False)
    eos = tok.eos_token_id

    def respond(prompt: list[int]) -> list[int]:
        turns = [i for i in range(len(prompt)) if prompt[i : i + len(first)] == first]
        return [*(second if turns else first), eos, *first]

    return respond


@pytest.fixture
def real_client(monkeypatch):
    """TRL's client class with the ``vllm`` import guard lifted (its HTTP code is untouched)."""
    import trl.generation.vllm_client as vc

    monkeypatch.setattr(vc, "is_vllm_available", lambda *a, **k: True)
    return vc.VLLMClient


def test_multi_turn_episodes_sampling_and_stop_tokens_go_through_the_server(world, real_client):
    _, data, _, tok = world
    tasks = load_tasks(data / "dataset.parquet")[:2]
    env = SearchEnv(
        toy.local_backends(toy.corpus()).search,
        toy.corpus(),
        EnvConfig(max_turns=3),
        truncate=token_truncator(tok, 12),
    )
    with FakeVLLMServer(responder(tok)) as server:
        client = real_client(base_url=server.url)
        sampler = VLLMServerSampler(
            client, temperature=0.7, top_p=0.9, top_k=5, stop_ids=[tok.eos_token_id]
        )
        slots = [(t, g, i) for g, t in enumerate(tasks) for i in range(2)]
        trajs = run_rollouts(
            slots,
            sampler=sampler,
            tokenizer=tok,
            env=env,
            config=RolloutConfig(max_turn_tokens=40, max_completion_tokens=400),
        )
    assert "/health" in server.paths and "/v1/models" in server.paths
    # Two turns, each one batched request over the live episodes.
    assert len(server.requests) == 2
    for req in server.requests:
        assert (req["temperature"], req["top_p"], req["top_k"]) == (0.7, 0.9, 5)
        assert req["stop_token_ids"] == [tok.eos_token_id] and req["max_tokens"] == 40
        assert req["n"] == 1 and req["return_token_ids"] and req["model"] == "tiny"
        assert len(req["prompt"]) == 4
    # Turn 2's contexts are turn 1's plus its completion and the environment's observation.
    for p1, p2, t in zip(server.requests[0]["prompt"], server.requests[1]["prompt"], trajs, strict=True):
        assert p1 == t.prompt_ids and p2[: len(p1)] == p1 and len(p2) > len(p1)
    for t in trajs:
        assert t.episode.terminated == "complete" and [x.action for x in t.episode.turns] == [
            "search",
            "search_complete",
        ]
        # The policy tokens are the server's completions, cut at the stop token.
        policy = [i for i, m in zip(t.completion_ids, t.env_mask, strict=True) if m]
        first = tok.encode(SEARCH, add_special_tokens=False) + [tok.eos_token_id]
        second = tok.encode(DONE, add_special_tokens=False) + [tok.eos_token_id]
        assert policy == first + second
        assert [lp for lp, m in zip(t.logprobs, t.env_mask, strict=True) if m] == [-0.25] * len(policy)


@pytest.mark.slow
def test_grpo_run_generates_through_the_server_and_logs_its_completions(world, real_client, monkeypatch):
    import trl.generation.vllm_generation as vg

    from ddai.pipelines.store import read_rollouts
    from ddai.trainer.grpo import GRPORunConfig, run_grpo

    root, data, tiny, tok = world
    monkeypatch.setattr(vg, "is_vllm_available", lambda *a, **k: True)
    synced: list[int] = []
    # The NCCL weight transfer: GPU-only transport, stubbed (the parameter walk still runs).
    monkeypatch.setattr(real_client, "init_communicator", lambda self, device=0: None)
    monkeypatch.setattr(
        real_client,
        "update_named_params",
        lambda self, meta, params: synced.append(sum(1 for _ in params)),
    )
    with FakeVLLMServer(responder(tok)) as server:
        result = run_grpo(
            GRPORunConfig(
                model=str(tiny),
                data=data / "dataset.parquet",
                corpus=data / "pages.parquet",
                output_dir=root / "grpo",
                logs=root / "logs",
                run_id="vllm_run",
                reward="ddai-phase1",
                n_agent=2,
                batch_size=4,
                max_steps=2,
                temperature=0.8,
                max_turns=3,
                max_turn_tokens=40,
                max_completion_tokens=400,
                obs_max_tokens=12,
                vllm="server",
                vllm_server_base_url=server.url,
                save_steps=10,
            ),
            toy.local_backends(toy.corpus()),
        )
    assert result.steps == 2 and result.rollouts_logged == 8
    assert len(synced) == 2 and synced[0] > 0  # weights pushed before each step's generation
    assert "/reset_prefix_cache" in server.paths
    # 2 steps × 2 turns, all at the run's sampling settings.
    assert len(server.requests) == 4
    assert {r["temperature"] for r in server.requests} == {0.8}
    rows = read_rollouts(root / "logs", ["vllm_run"]).to_pylist()
    assert len(rows) == 8
    for r in rows:
        assert r["response"].startswith(SEARCH) and DONE in r["response"]
        assert r["terminated"] == "complete" and r["num_turns"] == 2
