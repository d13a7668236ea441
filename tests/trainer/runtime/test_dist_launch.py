"""Two training processes on CPU (``--launch 2``: accelerate, gloo): each episode logged once with
globally unique ``sample_idx``, one checkpoint, one metrics file, one summary; under FSDP,
lock-step turns when one rank's episodes end early and one full checkpoint of the trained
weights; the same first-step loss as one process with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_schemas import check
from support.metrics_file import read_metrics
from support.toy_world import make_world

from ddai.pipelines.store import read_rollouts

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "fixtures"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("dist"))


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")
    env.pop("LOCAL_RANK", None)
    return env


def _ddai(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "ddai.cli.app", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _one_json(stdout: str, schema: str) -> dict:
    """The run's JSON summary, checked against ``docs/schemas/<schema>.json``; fails when more
    than one process printed one."""
    assert stdout.count('"output_dir"') == 1, stdout
    data = json.loads(stdout[stdout.index("{") :])
    check(schema, data)
    return data


def _grpo(tiny: Path, out: Path, logs: Path, run_id: str, *extra: str) -> dict:
    proc = _ddai(
        "train", "grpo", "--model", str(tiny),
        "--data", str(FIXTURES / "dataset.parquet"), "--corpus", str(FIXTURES / "pages.parquet"),
        "--out", str(out), "--logs", str(logs), "--run-id", run_id,
        "--reward", "ddai-phase1", "--n-agent", "2", "--batch-size", "4", "--max-steps", "2",
        "--max-turns", "2", "--max-turn-tokens", "8", "--max-completion-tokens", "64",
        "--obs-max-tokens", "8", "--save-steps", "2", "--logging-steps", "1", "--json", *extra,
    )  # fmt: skip
    return _one_json(proc.stdout, "train-grpo")


def test_grpo_on_two_processes_logs_every_episode_once(world):
    root, _, tiny = world
    logs = root / "logs"
    one = _grpo(tiny, root / "g1", logs, "one")
    two = _grpo(tiny, root / "g2", logs, "two", "--launch", "2")

    # --batch-size is per process: 2 processes × 4 rollouts × 2 steps, twice one process's rows.
    rows1 = read_rollouts(logs, runs=["one"]).to_pylist()
    rows2 = read_rollouts(logs, runs=["two"]).to_pylist()
    assert len(rows1) == one["rollouts_logged"] == 4 * 2
    assert len(rows2) == two["rollouts_logged"] == 2 * 4 * 2 == 2 * len(rows1)
    keys = [(r["step"], r["sample_idx"]) for r in rows2]
    assert len(set(keys)) == len(keys)
    assert sorted(keys) == [(s, i) for s in (1, 2) for i in range(8)]
    extras = [json.loads(r["extra"]) for r in rows2]
    # Rank r holds rows r·4 … r·4+3 of each step's global batch and samples with seed 0 + r.
    for r, e in zip(rows2, extras, strict=True):
        assert e["rank"] == r["sample_idx"] // 4 and e["rank_seed"] == e["rank"]
    # Groups stay whole on one rank: a (step, uid) group's rollouts come from one process.
    by_group: dict[tuple, set] = {}
    for r, e in zip(rows2, extras, strict=True):
        by_group.setdefault((r["step"], r["uid"]), set()).add(e["rank"])
    assert all(len(ranks) == 1 for ranks in by_group.values())

    out = root / "g2"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert (out / "model.safetensors").is_file() and not (out / ".final-stage").exists()
    metrics = read_metrics(out / "metrics.jsonl")
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2]  # one writer, one line per step


def test_fsdp_lockstep_turns_and_one_full_checkpoint(world):
    """2 CPU processes under the shipped FSDP config (FSDP2 over gloo); rank 1's episodes end on
    their first turn while rank 0's go on."""
    root, data, tiny = world
    out = root / "fsdp"
    out.mkdir()
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "configs" / "accelerate" / "fsdp.yaml"),
        "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(_port()),
        str(Path(__file__).with_name("dist_worker.py")),
        str(tiny), str(data), str(out), str(root / "fsdp-logs"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0 = json.loads((out / "rank0.json").read_text())
    r1 = json.loads((out / "rank1.json").read_text())
    assert r0["fsdp"] and r1["fsdp"]  # the weights really were sharded
    # Both ranks run as many turns as rank 0's longest episode in every generation call (the
    # preflight's sample, then 2 steps); rank 1's episodes end on turn 1 and it idles through
    # the rest.
    assert len(r0["turns"]) == len(r1["turns"]) == 1 + 2, (r0, r1)
    assert r0["turns"] == r1["turns"] and min(r0["turns"]) > 1
    assert r0["idle"] == 0 and r1["idle"] == sum(n - 1 for n in r1["turns"])
    rows = read_rollouts(root / "fsdp-logs", runs=["lockstep"]).to_pylist()
    assert r0["logged"] == len(rows) == 2 * 4 * 2 and r1["logged"] == 0
    longest: dict[int, dict[int, int]] = {0: {}, 1: {}}
    for r in rows:
        by_step = longest[json.loads(r["extra"])["rank"]]
        by_step[r["step"]] = max(by_step.get(r["step"], 0), r["num_turns"])
    assert longest[1] == {1: 1, 2: 1}
    assert [longest[0][s] for s in (1, 2)] == r0["turns"][1:]

    # One full checkpoint: it loads with from_pretrained and holds exactly the trained weights
    # (gathered from the shards before the save), which differ from the starting ones.
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    saved = AutoModelForCausalLM.from_pretrained(out).state_dict()
    start = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    trained = load_file(out / "trained.safetensors")
    assert set(trained) == set(saved)
    assert all(torch.equal(saved[k], trained[k]) for k in trained)
    assert all(not torch.equal(start[k], trained[k]) for k in start)


def test_sft_lora_under_fsdp_saves_the_adapter_and_one_merged_model(world):
    root, data, tiny = world
    out = root / "lora"
    proc = _ddai(
        "train", "sft", "--model", str(tiny), "--data", str(data / "sft.parquet"),
        "--out", str(out), "--max-steps", "2", "--lr", "1e-2", "--batch-size", "2",
        "--max-length", "256", "--logging-steps", "1", "--lora", "--json",
        "--launch", "2", "--accelerate-config", str(ROOT / "configs" / "accelerate" / "fsdp.yaml"),
    )  # fmt: skip
    summary = _one_json(proc.stdout, "train-sft")
    assert summary["lora"] and summary["steps"] == 2 and summary["changed_parameters"] > 0
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out)  # a plain model: the adapter merged in
    assert not any("lora" in n for n, _ in merged.named_parameters())
    final = summary["final_model"]  # merged into a reloaded base, checked against the adapter
    assert (final["artifact"], final["dtype"]) == ("merged", "float32")
    assert final["max_abs_logit_diff"] <= final["tolerance"] and final["update_max_abs_logit"] > 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]


def _port() -> int:
    from ddai.trainer.runtime.launch import free_port

    return free_port()


def test_sft_first_step_loss_matches_one_process_with_the_same_global_batch(world):
    root, data, tiny = world

    def sft(out: Path, *extra: str) -> dict:
        proc = _ddai(
            "train", "sft", "--model", str(tiny), "--data", str(data / "sft.parquet"),
            "--out", str(out), "--max-steps", "2", "--lr", "1e-3", "--max-length", "256",
            "--logging-steps", "1", "--save-steps", "2", "--json", *extra,
        )  # fmt: skip
        return _one_json(proc.stdout, "train-sft")

    one = sft(root / "s1", "--batch-size", "4")
    two = sft(root / "s2", "--batch-size", "2", "--launch", "2")
    assert one["steps"] == two["steps"] == 2
    first = [read_metrics(root / d / "metrics.jsonl")[0] for d in ("s1", "s2")]
    assert first[0]["step"] == first[1]["step"] == 1
    assert first[1]["loss"] == pytest.approx(first[0]["loss"], rel=1e-4)
    out = root / "s2"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert [m["step"] for m in read_metrics(out / "metrics.jsonl") if "loss" in m] == [1, 2]
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


GRPO_SCRIPT = """
import sys
from pathlib import Path

import trl.generation.vllm_client as vc
import trl.generation.vllm_generation as vg

from ddai.trainer import toy
from ddai.trainer.grpo.train import GRPORunConfig, run_grpo
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

url, tiny, out, logs, run_id, batch = sys.argv[1:7]
# vLLM cannot be installed on CPU: lift TRL's import guard; its HTTP client is used as shipped.
vc.is_vllm_available = vg.is_vllm_available = lambda *a, **k: True
# NCCL weight transfer: GPU-only transport, stubbed.
vc.VLLMClient.init_communicator = lambda self, device=0: None
vc.VLLMClient.update_named_params = lambda self, meta, params: [None for _ in params]
data = Path(sys.argv[7])
run_grpo(
    GRPORunConfig(
        model=tiny, data=data / "dataset.parquet", corpus=data / "pages.parquet",
        output_dir=Path(out), logs=Path(logs), run_id=run_id,
        rewards=RewardOverrides(reward="ddai-phase1"), n_agent=2, batch_size=int(batch),
        max_steps=1, temperature=1.0, loss_type="dapo", logging_steps=1, save_steps=10,
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=48, max_completion_tokens=160, obs_max_tokens=8
        ),
        vllm="server", vllm_server_base_url=url,
        # The fake server's log-probs are a constant: no vLLM-vs-trainer correction.
        overrides={"vllm_importance_sampling_correction": False},
    ),
    toy.local_backends(toy.corpus()),
)
from ddai.trainer.runtime.dist import shutdown

shutdown()
"""


def _search_responder(tok):
    """Completions fixed by the prompt and their place in the request, so one global batch gets
    the same rollouts on any number of processes (rank 0 sends every rank's contexts, in global
    order). Even places search and then complete, odd ones complete at once: each group's two
    rollouts differ in length and reward (non-zero advantages). The thinking runs to
    ``len(prompt) % 4`` extra phrases, so the tasks, and the two ranks, differ in token counts."""

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    think, filler = enc("<think>"), enc(" look it up")
    search, done = (
        enc("</think>\n<search>revenue</search>"),
        enc("</think>\n<search_complete>true</search_complete>"),
    )
    eos = tok.eos_token_id

    def respond(prompt: list[int], i: int) -> list[int]:
        searched = any(prompt[j : j + len(search)] == search for j in range(len(prompt)))
        action = done if searched or i % 2 else search
        return [*think, *filler * (len(prompt) % 4), *action, eos]

    return respond


def test_grpo_first_step_loss_matches_one_process_with_the_same_global_batch(world, tmp_path):
    """8 rollouts on one process vs 4 on each of two, sampled at temperature 1 by a deterministic
    server (TRL's ``VLLMClient`` against the local fake, on the main process for both ranks).
    DAPO's first-step loss is −Σ A·tokens / global tokens: non-zero when a group's rollouts differ
    in length, and equal across layouts only if each rank normalizes by the global token count
    ÷ processes (ranks hold unequal token counts here). The gradient norm checks the gradients
    of the on-policy log-probs, averaged across ranks. (Greedy decoding no longer serves: under
    top_k 1 the loss scores every rollout token at probability 1, entropy 0, and the loss is 0.)"""
    from support.fake_vllm import FakeVLLMServer

    from ddai.trainer.modeling import load_tokenizer

    _, data, tiny = world
    script = tmp_path / "grpo_vllm.py"
    script.write_text(GRPO_SCRIPT, encoding="utf-8")
    logs = tmp_path / "logs"
    two = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    two += ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
    two += ["--dynamo_backend", "no", "--main_process_port", str(_port())]
    env = dict(_env(), CUDA_VISIBLE_DEVICES="")
    with FakeVLLMServer(_search_responder(load_tokenizer(str(tiny))), indexed=True) as server:
        for launch, run_id, batch in (([sys.executable], "l1", 8), (two, "l2", 4)):
            args = [server.url, str(tiny), str(tmp_path / run_id), str(logs), run_id, str(batch)]
            proc = subprocess.run(
                [*launch, str(script), *args, str(data)],
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
            )
            assert proc.returncode == 0, proc.stderr[-4000:]
    first = [read_metrics(tmp_path / d / "metrics.jsonl")[0] for d in ("l1", "l2")]
    assert first[0]["step"] == first[1]["step"] == 1
    rows = [read_rollouts(logs, runs=[r]).to_pylist() for r in ("l1", "l2")]
    assert [len(r) for r in rows] == [8, 8]
    key = ("uid", "response", "reward", "advantage", "num_turns")
    by_idx = [{r["sample_idx"]: tuple(r[k] for k in key) for r in rs} for rs in rows]
    assert by_idx[0] == by_idx[1]  # the same global batch, row for row
    # In every group one rollout searched and one answered at once; some group's rewards differ.
    rows2 = sorted(rows[1], key=lambda r: r["sample_idx"])
    assert [r["num_turns"] for r in rows2] == [2, 1] * 4
    assert any(r["advantage"] != 0 for r in rows2)
    tokens = [json.loads(r["extra"])["policy_tokens"] for r in rows2]
    assert sum(tokens[:4]) != sum(tokens[4:])  # rank 0's and rank 1's token counts differ
    # At the first step the ratio is 1: DAPO's loss is −Σ A·tokens over the global token count.
    expected = -sum(r["advantage"] * n for r, n in zip(rows2, tokens, strict=True)) / sum(tokens)
    assert abs(expected) > 1e-3
    assert first[0]["loss"] == pytest.approx(expected, rel=1e-4)
    assert first[1]["loss"] == pytest.approx(first[0]["loss"], rel=1e-4)
    assert first[0]["grad_norm"] > 0 and first[0]["entropy"] > 1  # temperature 1: not one-hot
    assert first[1]["grad_norm"] == pytest.approx(first[0]["grad_norm"], rel=1e-4)
