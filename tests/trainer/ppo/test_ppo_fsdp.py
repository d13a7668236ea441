"""``ddai train ppo`` under FSDP2 on 2 CPU processes (gloo, the shipped
``configs/accelerate/fsdp.yaml``), through ``tests/trainer/ppo/dist_ppo_worker.py``: the policy and
the critic really are sharded, sampling goes through the sharded policy, the saved policy, critic
and checkpoint hold exactly the weights the trainer's gather gives, and 1 step + 1 resumed step
equal 2 steps (rollouts and weights bit-identical: optimizer and random states saved whole)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.lazy import heavy, safetensors_torch, torch
from support.toy_world import make_world

from ddai.pipelines.store import read_rollouts
from ddai.trainer.runtime.launch import free_port

model = heavy("ddai.trainer.value.model")

ROOT = Path(__file__).parents[3]
WORKER = Path(__file__).with_name("dist_ppo_worker.py")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ppo_fsdp"), hidden_size=32)


def _launch(root: Path, data: Path, tiny: Path, tag: str, steps: int, *extra: str) -> None:
    out = root / tag
    out.mkdir(exist_ok=True)
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "configs" / "accelerate" / "fsdp.yaml"),
        "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(free_port()),
        str(WORKER), str(tiny), str(data), str(out), str(root / f"{tag}-logs"), str(steps), *extra,
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    env.pop("LOCAL_RANK", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _rows(logs: Path) -> list[dict]:
    rows = read_rollouts(logs, ["fsdp_ppo"]).to_pylist()
    for r in rows:
        extra = json.loads(r["extra"])
        extra.pop("episode_key")  # a fresh uuid per episode
        r["extra"] = extra
    return sorted(rows, key=lambda r: (r["step"], r["sample_idx"]))


@pytest.mark.slow
def test_fsdp_ppo_samples_sharded_and_saves_the_gathered_weights(world):
    root, data, tiny = world
    _launch(root, data, tiny, "two", 2)
    out = root / "two"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    # every update ran on sharded policy and critic (DTensor parameters), on both ranks
    assert all(r["sharded"] == [[True, True], [True, True]] for r in ranks)
    # both ranks sampled through the sharded policy: the preflight's call, then one per step
    assert ranks[0]["generations"] == ranks[1]["generations"] == 3
    assert ranks[0]["logged"] == len(_rows(root / "two-logs")) == 2 * 2 * 4
    assert ranks[0]["changed"] == ranks[1]["changed"] > 0

    # The policy saved (final folder and checkpoint) is the trained one, gathered from the
    # shards: every tensor equal to the trainer's own gather after the last update.
    trained = safetensors_torch.load_file(out / "trained_policy.safetensors")
    start = safetensors_torch.load_file(tiny / "model.safetensors")
    for saved in (
        safetensors_torch.load_file(out / "model.safetensors"),
        safetensors_torch.load_file(out / "checkpoint-2" / "model.safetensors"),
    ):
        assert set(saved) == set(start)  # the tied lm_head is not stored, as in the start
        assert all(torch.equal(saved[k], trained[k]) for k in saved)
    assert all(not torch.equal(start[k], trained[k]) for k in start)
    assert torch.equal(trained["lm_head.weight"], trained["model.embed_tokens.weight"])
    # The critic too (head and the trunk it trained).
    critic_trained = safetensors_torch.load_file(out / "trained_critic.safetensors")
    for folder in (out / "critic", out / "checkpoint-2" / "critic"):
        critic, _ = model.load_value_model(folder)
        saved = critic.state_dict()
        assert set(saved) == set(critic_trained)
        assert all(torch.equal(saved[k], critic_trained[k]) for k in saved)


@pytest.mark.slow
def test_fsdp_ppo_one_plus_one_resumed_step_equals_two_steps(world):
    root, data, tiny = world
    if not (root / "two" / "model.safetensors").is_file():
        _launch(root, data, tiny, "two", 2)
    _launch(root, data, tiny, "resumed", 1)
    _launch(root, data, tiny, "resumed", 2, "--resume")
    straight, resumed = _rows(root / "two-logs"), _rows(root / "resumed-logs")
    assert len(straight) == len(resumed) == 16
    assert straight == resumed
    a = safetensors_torch.load_file(root / "two" / "model.safetensors")
    b = safetensors_torch.load_file(root / "resumed" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ca, _ = model.load_value_model(root / "two" / "critic")
    cb, _ = model.load_value_model(root / "resumed" / "critic")
    sa, sb = ca.state_dict(), cb.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_lora_under_fsdp_is_refused_naming_the_alternatives():
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from ddai.trainer.common import TrainConfigError
    from ddai.trainer.ppo import sharding

    acc = SimpleNamespace(distributed_type=DistributedType.FSDP)
    peft_policy = SimpleNamespace(peft_config={"default": object()})
    with pytest.raises(TrainConfigError, match=r"--lora under FSDP.*without --lora"):
        sharding.prepare(acc, peft_policy, None, None, None)
