"""``ddai train ppo`` and ``ddai train value`` under ``accelerate launch`` with 2 CPU processes
(gloo): the rollout log holds every rank's episodes once (rows = global batch × steps, unique
(step, sample_idx)), one metrics file, one checkpoint, one summary, per-rank seeds recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_schemas import check
from support.lazy import heavy, torch
from support.toy_world import curriculum_world, make_world

from ddai.pipelines.store import read_rollouts
from ddai.trainer.runtime.launch import free_port

value_model = heavy("ddai.trainer.value.model")


def launch(args: list[str], procs: int, cwd: Path) -> subprocess.CompletedProcess:
    """``accelerate launch`` of the ddai CLI; 2 CPU processes need ``--multi_gpu`` (``--cpu``
    with ``--num_processes 2`` starts one process), the trainer picks gloo itself."""
    dist = ["--multi_gpu", "--num_processes", str(procs)] if procs > 1 else ["--num_processes", "1"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *dist]
    cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd += ["--main_process_port", str(free_port())]
    cmd += ["-m", "ddai.cli.app", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def via_launch_flag(args: list[str], procs: int, cwd: Path) -> subprocess.CompletedProcess:
    """The same through the command's own ``--launch N`` (it re-runs itself under accelerate)."""
    cmd = [sys.executable, "-m", "ddai.cli.app", *args, "--launch", str(procs)]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("dist"), hidden_size=32)


def ppo_args(root: Path, data: Path, tiny: Path, tag: str) -> list[str]:
    return [
        "train", "ppo", "--model", str(tiny), "--data", str(data / "dataset.parquet"),
        "--corpus", str(data / "pages.parquet"), "--out", str(root / tag), "--logs", str(root / "logs"),
        "--run-id", tag, "--reward", "ddai-phase1", "--search", "local", "--generator", "local",
        "--judge", "local", "--n-agent", "2", "--batch-size", "4", "--ppo-epochs", "1",
        "--max-steps", "2", "--max-turns", "2", "--max-turn-tokens", "8",
        "--max-completion-tokens", "48", "--obs-max-tokens", "8", "--json",
    ]  # fmt: skip


@pytest.mark.slow
def test_ppo_two_processes_log_every_episode_once(toy_world):
    root, data, tiny = toy_world
    one = launch(ppo_args(root, data, tiny, "p1"), 1, root)
    assert one.returncode == 0, one.stderr[-3000:]
    two = launch(ppo_args(root, data, tiny, "p2"), 2, root)
    assert two.returncode == 0, two.stderr[-3000:]
    # One summary (rank 0's), not one per process.
    assert two.stdout.count('"run_id"') == 1
    summary = json.loads(two.stdout)
    check("train-ppo", summary)  # docs/schemas/train-ppo.json
    rows1 = read_rollouts(root / "logs", ["p1"]).to_pylist()
    rows2 = read_rollouts(root / "logs", ["p2"]).to_pylist()
    # --batch-size is per device: 4 rollouts × 2 steps on one process, twice that on two.
    assert len(rows1) == 8 and len(rows2) == 16 == summary["rollouts_logged"]
    keys = {(r["step"], r["sample_idx"]) for r in rows2}
    assert len(keys) == 16 and {s for _, s in keys} == set(range(8))
    # Each rank ran its own prompts: a step's 8 rollouts cover 4 prompts, 2 rollouts each.
    for step in (1, 2):
        uids = [r["uid"] for r in rows2 if r["step"] == step]
        assert sorted(uids.count(u) for u in set(uids)) == [2, 2, 2, 2]
    out = root / "p2"
    (metrics,) = _metrics(out)
    assert [m["step"] for m in metrics] == [1, 2]  # one file, one row per step
    assert list(out.glob("*.safetensors")) == [out / "model.safetensors"]
    # one resumable checkpoint (written by the main process after the last step), no leftovers
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2"]
    assert not list(out.glob(".final-*")) and not list(out.glob(".checkpoint-*"))
    value_model.load_value_model(out / "critic")
    run_cfg = json.loads((out / "run_config.json").read_text())
    assert run_cfg["world_size"] == 2 and run_cfg["seeds"] == [0, 1]
    assert run_cfg["config"]["batch_size"] == 4


@pytest.fixture(scope="module")
def value_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vdist")
    return root, curriculum_world(root, "You are a search agent.")


@pytest.mark.slow
def test_value_two_processes_write_one_checkpoint_and_one_metrics_file(value_world):
    root, tiny = value_world
    out = root / "v2"
    args = [
        "train", "value", "--model", str(tiny), "--out", str(out), "--logs", str(root / "logs"),
        "--unfreeze", "1", "--max-steps", "3", "--batch-size", "2", "--eval-steps", "2",
        "--max-length", "256", "--head-lr", "1e-3", "--json",
        "--system-prompt", str(root / "system.txt"),
    ]  # fmt: skip
    res = via_launch_flag(args, 2, root)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)  # one summary: the output is a single JSON document
    assert summary["steps"] == 3 and "after_value_eval_auc" in summary
    (metrics,) = _metrics(out)
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    assert "value/eval_auc" in metrics[2] and "value/loss" in metrics[1]
    model, _ = value_model.load_value_model(out)
    assert model.unfreeze == 1
    run_cfg = json.loads((out / "run_config.json").read_text())
    assert run_cfg["world_size"] == 2 and run_cfg["seeds"] == [0, 1]


def _value_args(root, tiny, steps: int) -> list[str]:
    """``ddai train value`` for ``steps`` steps, evaluated at the last, on the pairwise loss only."""
    return [
        "train", "value", "--model", str(tiny), "--logs", str(root / "logs"), "--unfreeze", "1",
        "--max-steps", str(steps), "--eval-steps", str(steps), "--max-length", "256",
        "--head-lr", "1e-3", "--mc-coef", "0", "--system-prompt", str(root / "system.txt"), "--json",
    ]  # fmt: skip


def _metrics(*runs: Path) -> list[list[dict]]:
    """Each run folder's ``metrics.jsonl`` rows."""
    return [[json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] for d in runs]


@pytest.mark.slow
def test_value_one_and_two_processes_with_the_same_global_batch_train_alike(value_world):
    """Every step draws one global batch; 2 processes × 2 pairs see the pairs 1 process × 4 sees,
    and DDP's averaged gradient equals the gradient of the mean (pairwise loss: a mean over
    pairs; the token-weighted MC term is off so that the halves weigh the same)."""
    root, tiny = value_world
    common = _value_args(root, tiny, 3)
    one = launch([*common, "--out", str(root / "g1"), "--batch-size", "4"], 1, root)
    assert one.returncode == 0, one.stderr[-3000:]
    two = launch([*common, "--out", str(root / "g2"), "--batch-size", "2"], 2, root)
    assert two.returncode == 0, two.stderr[-3000:]
    m1, m2 = _metrics(root / "g1", root / "g2")
    for a, b in zip(m1[1:], m2[1:], strict=True):
        assert b["value/loss"] == pytest.approx(a["value/loss"], rel=1e-4)
    v1, _ = value_model.load_value_model(root / "g1")
    v2, _ = value_model.load_value_model(root / "g2")
    # The head's bias cancels in the pairwise loss (v⁺ − v⁻): its gradient is float noise that
    # Adam scales to full steps. The weights, which the loss does see, must agree.
    h1, h2 = dict(v1.head.named_parameters()), dict(v2.head.named_parameters())
    assert h1.keys() == h2.keys() and "proj.weight" in h1
    for n in sorted(set(h1) - {"proj.bias"}):
        assert torch.allclose(h1[n], h2[n], atol=1e-5), n


def test_value_grad_accum_splits_the_same_pairs_into_micro_batches(value_world):
    """2 micro-batches of 2 pairs accumulate into the step 1 batch of 4 pairs takes: the same
    draw, the same mean gradient (pairwise loss only: a mean over pairs)."""
    from typer.testing import CliRunner

    from ddai.cli.app import app

    root, tiny = value_world
    common = _value_args(root, tiny, 2)
    runner = CliRunner()
    a = runner.invoke(app, [*common, "--out", str(root / "a1"), "--batch-size", "4"])
    b = runner.invoke(
        app, [*common, "--out", str(root / "a2"), "--batch-size", "2", "--grad-accum", "2"]
    )
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    m1, m2 = _metrics(root / "a1", root / "a2")
    assert len(m1) == len(m2) == 3
    for x, y in zip(m1[1:], m2[1:], strict=True):
        assert y["value/loss"] == pytest.approx(x["value/loss"], rel=1e-5)
    v1, _ = value_model.load_value_model(root / "a1")
    v2, _ = value_model.load_value_model(root / "a2")
    assert torch.allclose(v1.head.proj.weight, v2.head.proj.weight, atol=1e-6)
    res = runner.invoke(app, [*common, "--out", str(root / "a3"), "--grad-accum", "0"])
    assert res.exit_code == 2 and "--grad-accum" in res.output


def test_ppo_grad_accum_must_divide_the_mini_batch():
    from ddai.trainer.common import TrainConfigError
    from ddai.trainer.ppo.train import PPORunConfig

    cfg = dict(model="m", data="d", corpus="c", output_dir="o", batch_size=8)
    PPORunConfig(**cfg, mini_batch_size=4, grad_accum=2).check()
    for bad in ({"mini_batch_size": 4, "grad_accum": 3}, {"mini_batch_size": 3, "grad_accum": 3}):
        with pytest.raises(TrainConfigError, match="--grad-accum"):
            PPORunConfig(**cfg, **bad).check()
