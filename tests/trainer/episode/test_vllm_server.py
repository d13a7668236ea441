"""``--vllm server``: generation through TRL's real ``VLLMClient`` against a local server that
speaks the vLLM/``trl vllm-serve`` HTTP protocol. Multi-turn episodes, sampling parameters and
stop tokens go over the wire; the rollouts (and in a GRPO run, the rollout log) are the server's
completions. Only the GPU weight-transfer transport (NCCL) and the ``vllm`` import guard are
stubbed: vLLM itself cannot be installed on a CPU machine."""

from __future__ import annotations

import os

import pytest
from support.fake_vllm import FakeVLLMServer
from support.toy_world import run_fields

from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.rollout import (
    RolloutConfig,
    VLLMServerSampler,
    run_rollouts,
    token_truncator,
)
from ddai.trainer.episode.tasks import load_tasks
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.runtime.launch import free_port
from ddai.trainer.tiny import TinySpec, build_tiny

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
    for p1, p2, t in zip(
        server.requests[0]["prompt"], server.requests[1]["prompt"], trajs, strict=True
    ):
        assert p1 == t.prompt_ids and p2[: len(p1)] == p1 and len(p2) > len(p1)
    for t in trajs:
        assert t.episode.terminated == "complete" and [x.action for x in t.episode.turns] == [
            "search",
            "search_complete",
        ]
        # The policy tokens are the server's completions, cut at the stop token.
        policy = [i for i, m in zip(t.completion_ids, t.env_mask, strict=True) if m]
        first = [*tok.encode(SEARCH, add_special_tokens=False), tok.eos_token_id]
        second = [*tok.encode(DONE, add_special_tokens=False), tok.eos_token_id]
        assert policy == first + second
        assert [lp for lp, m in zip(t.logprobs, t.env_mask, strict=True) if m] == [-0.25] * len(
            policy
        )


@pytest.mark.slow
def test_grpo_run_generates_through_the_server_and_logs_its_completions(
    world, real_client, monkeypatch
):
    import trl.generation.vllm_generation as vg

    from ddai.pipelines.store import read_rollouts
    from ddai.trainer.grpo.train import GRPORunConfig, run_grpo

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
                **run_fields(tiny, data, root / "grpo", root / "logs", "vllm_run"),
                n_agent=2,
                batch_size=4,
                max_steps=2,
                temperature=0.8,
                vllm="server",
                vllm_server_base_url=server.url,
                save_steps=10,
                episode=EpisodeConfig(
                    max_turns=3, max_turn_tokens=40, max_completion_tokens=400, obs_max_tokens=12
                ),
                rewards=RewardOverrides(reward="ddai-phase1"),
            ),
            toy.local_backends(toy.corpus()),
        )
    assert result.steps == 2 and result.rollouts_logged == 8
    assert len(synced) == 2 and synced[0] > 0  # weights pushed before each step's generation
    assert "/reset_prefix_cache" in server.paths
    # The preflight's sampled episodes (2 prompts × 2 rollouts, 2 turns), then 2 steps × 2 turns of
    # 4 rollouts: all through the server, at the run's sampling settings.
    assert [len(r["prompt"]) for r in server.requests] == [4] * 6
    assert {r["temperature"] for r in server.requests} == {0.8}
    rows = read_rollouts(root / "logs", ["vllm_run"]).to_pylist()
    assert len(rows) == 8
    for r in rows:
        assert r["response"].startswith(SEARCH) and DONE in r["response"]
        assert r["terminated"] == "complete" and r["num_turns"] == 2


RANKS_SCRIPT = """
import json, sys
from pathlib import Path

import trl.generation.vllm_client as vc
from accelerate import Accelerator

from ddai.trainer import toy
from ddai.trainer.episode.tasks import load_tasks
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.episode.rollout import RolloutConfig, VLLMServerSampler, run_rollouts, token_truncator

url, data, tiny, out = sys.argv[1:5]
vc.is_vllm_available = lambda *a, **k: True
acc = Accelerator(cpu=True)
tok = load_tokenizer(tiny)
# Rank 0 gets one policy turn (then the forced completion takes its 2nd and last), rank 1 needs
# two of its three: they run unequal turns.
max_turns = 2 if acc.process_index == 0 else 3
env = SearchEnv(toy.local_backends(toy.corpus()).search, toy.corpus(), EnvConfig(max_turns=max_turns),
                truncate=token_truncator(tok, 12))
client = vc.VLLMClient(base_url=url) if acc.is_main_process else None
sampler = VLLMServerSampler(client, temperature=1.0, top_p=1.0, top_k=0,
                            stop_ids=[tok.eos_token_id], accelerator=acc)
task = load_tasks(Path(data) / "dataset.parquet")[acc.process_index]
trajs = run_rollouts([(task, 0, 0), (task, 0, 1)], sampler=sampler, tokenizer=tok, env=env,
                     config=RolloutConfig(max_turn_tokens=40, max_completion_tokens=400))
rows = [{"prompt": t.prompt_ids, "policy": [i for i, m in zip(t.completion_ids, t.env_mask) if m],
         "turns": len(t.episode.turns), "terminated": t.episode.terminated} for t in trajs]
Path(out, f"rank{acc.process_index}.json").write_text(json.dumps(rows))
# A gloo group left to interpreter teardown can abort the process ("terminate called without an
# active exception"): end it explicitly, as ddai's CLI does after every command.
acc.end_training()
"""


def _two_ranks(world, tmp_path, script_text: str) -> FakeVLLMServer:
    """``script_text`` run on two CPU processes by ``accelerate launch`` with the fake server's
    URL, the toy data, the tiny model and ``tmp_path`` as arguments; returns the (closed) server
    with the requests it got."""
    import subprocess
    import sys

    _, data, tiny, tok = world
    script = tmp_path / "two_ranks.py"
    script.write_text(script_text, encoding="utf-8")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    cmd += ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
    cmd += ["--dynamo_backend", "no", "--main_process_port", str(free_port())]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    with FakeVLLMServer(responder(tok)) as server:
        res = subprocess.run(
            [*cmd, str(script), server.url, str(data), str(tiny), str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert res.returncode == 0, res.stderr[-3000:]
    return server


@pytest.mark.slow
def test_two_ranks_generate_through_the_main_process_client(world, tmp_path):
    import json

    tok = world[3]
    server = _two_ranks(world, tmp_path, RANKS_SCRIPT)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # Turn 1: one request holding both ranks' contexts (rank 0's first); turn 2: rank 1's alone,
    # while rank 0, done, waits it out without a request of its own.
    assert len(server.requests) == 2
    assert server.requests[0]["prompt"] == [
        r0[0]["prompt"],
        r0[1]["prompt"],
        r1[0]["prompt"],
        r1[1]["prompt"],
    ]
    assert len(server.requests[1]["prompt"]) == 2
    assert all(p[: len(r1[0]["prompt"])] == r1[0]["prompt"] for p in server.requests[1]["prompt"])
    first = [*tok.encode(SEARCH, add_special_tokens=False), tok.eos_token_id]
    second = [*tok.encode(DONE, add_special_tokens=False), tok.eos_token_id]
    assert [r["policy"] for r in r0] == [first, first] and {r["terminated"] for r in r0} == {
        "max_turns"
    }
    assert [r["policy"] for r in r1] == [first + second] * 2
    assert {r["terminated"] for r in r1} == {"complete"}


GRPO_SCRIPT = """
import json, sys
from pathlib import Path

import trl.generation.vllm_client as vc
import trl.generation.vllm_generation as vg

from ddai.trainer import toy
from ddai.trainer.grpo.train import GRPORunConfig, run_grpo
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

url, data, tiny, out = sys.argv[1:5]
vc.is_vllm_available = vg.is_vllm_available = lambda *a, **k: True
# NCCL weight transfer: GPU-only transport, stubbed.
vc.VLLMClient.init_communicator = lambda self, device=0: None
vc.VLLMClient.update_named_params = lambda self, meta, params: [None for _ in params]
data = Path(data)
result = run_grpo(
    GRPORunConfig(
        model=tiny, data=data / "dataset.parquet", corpus=data / "pages.parquet",
        output_dir=Path(out) / "grpo", logs=Path(out) / "logs", run_id="vllm2",
        rewards=RewardOverrides(reward="ddai-phase1"), n_agent=2, batch_size=4, max_steps=1,
        episode=EpisodeConfig(
            max_turns=3, max_turn_tokens=40, max_completion_tokens=400, obs_max_tokens=12
        ),
        vllm="server", vllm_server_base_url=url, save_steps=10,
    ),
    toy.local_backends(toy.corpus()),
)
"""


@pytest.mark.slow
def test_grpo_vllm_server_on_two_processes_uses_the_main_process_client(world, tmp_path):
    """The issue's bug: ranks >= 1 have no client (TRL makes it on the main process only) and
    raised AttributeError at the first rollout. Both ranks' episodes now go through rank 0."""
    server = _two_ranks(world, tmp_path, GRPO_SCRIPT)
    # The preflight (2 prompts × 2 rollouts per rank), then one step (4 rollouts per rank), two
    # turns each: every request carries both ranks' episodes.
    assert [len(r["prompt"]) for r in server.requests] == [8, 8, 8, 8]
