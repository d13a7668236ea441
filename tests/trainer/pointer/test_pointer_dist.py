"""``ddai pointer train`` under ``accelerate launch`` with 2 CPU processes: each rank trains on
its share of every batch (loss weighted by its share), so the run equals the one-process run
(same weights up to float summation order), and only the main process writes the outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.lazy import safetensors_torch, torch
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.trainer.runtime.launch import free_port

runner = CliRunner()


def ddai(*args) -> dict:
    res = runner.invoke(app, ["pointer", *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.slow
def test_two_processes_train_the_same_selector_as_one(tmp_path):
    w, store = tmp_path / "world", tmp_path / "store.safetensors"
    ddai("world", w, "--queries", 60, "--demos", 100, "--seed", 1)
    ddai("embed", w, "--out", store, "--k", 8)
    train = ["train", "--store", store, "--mode", "sft", "--epochs", 3, "--world", w]
    train += ["--batch-queries", 16]  # 42 examples: batches of 16, 16 and 10
    one = ddai(*train, "--out", tmp_path / "one")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    cmd += ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
    cmd += ["--dynamo_backend", "no", "--main_process_port", str(free_port())]
    cmd += ["-m", "ddai.cli.app", "pointer", *map(str, train), "--out", str(tmp_path / "two")]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    two = json.loads(res.stdout)  # one summary, from the main process
    assert two["examples"] == one["examples"] == 42
    a = safetensors_torch.load_file(str(tmp_path / "one" / "model.safetensors"))
    b = safetensors_torch.load_file(str(tmp_path / "two" / "model.safetensors"))
    assert a.keys() == b.keys()
    # cand_bias.bias shifts every candidate's logit alike: softmax ignores it, its gradient is
    # float noise, and Adam scales noise to full-size steps; every real weight must agree.
    for k in sorted(set(a) - {"cand_bias.bias"}):
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    hist1 = [json.loads(x) for x in (tmp_path / "one" / "history.jsonl").read_text().splitlines()]
    hist2 = [json.loads(x) for x in (tmp_path / "two" / "history.jsonl").read_text().splitlines()]
    assert len(hist2) == len(hist1) == 3
    for h1, h2 in zip(hist1, hist2, strict=True):
        assert h2["sft/nll"] == pytest.approx(h1["sft/nll"], rel=1e-4)
    assert sorted(
        p.name for p in (tmp_path / "two").iterdir() if not p.name.startswith(".")
    ) == sorted(p.name for p in (tmp_path / "one").iterdir() if not p.name.startswith("."))
