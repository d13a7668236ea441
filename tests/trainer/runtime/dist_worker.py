"""A GRPO run for ``accelerate launch`` in the multi-process tests, where rank 1's episodes end
on their first turn while rank 0's go on: each rank writes ``rank<R>.json`` with how many turns
every generation call ran, how many of them it idled through and whether the model was sharded
(FSDP); the main process also writes the trained weights, gathered before the final save, to
``trained.safetensors``.

    accelerate launch --multi_gpu --num_processes 2 tests/trainer/runtime/dist_worker.py TINY TOY OUT LOGS
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/: launched as a script, not by pytest
from support.toy_world import run_fields, run_rank

from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import random

from ddai.pipelines.backends import JudgeResult
from ddai.trainer import toy
from ddai.trainer.episode import episodes, rollout
from ddai.trainer.episode.env import SearchEnv
from ddai.trainer.grpo import train as grpo
from ddai.trainer.runtime import dist
from ddai.trainer.runtime import save as saves


class RandomJudge:
    """Seeded random scores: reward variance in every group, so training changes the weights."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def judge(self, reqs):
        return [JudgeResult(score=self.rng.random()) for _ in reqs]


def main() -> None:
    tiny, data, out, logs = (Path(a) for a in sys.argv[1:5])
    calls: list[int] = []
    idled = [0]

    real_step = SearchEnv.step

    def step(self, episode, text):
        res = real_step(self, episode, text)
        if dist.rank() == 1:  # this rank's episodes all end on their first turn
            episode.done = True
            episode.terminated = episode.terminated or "complete"
        return res

    SearchEnv.step = step

    real_idle = rollout.HFSampler.idle

    def idle(self, context):
        idled[0] += 1
        return real_idle(self, context)

    rollout.HFSampler.idle = idle

    real_run = episodes.run_rollouts

    def counted(*args, **kwargs):
        turns = [0]
        kwargs["on_turn"] = lambda turn, live: turns.__setitem__(0, turn)
        trajs = real_run(*args, **kwargs)
        calls.append(turns[0])
        return trajs

    episodes.run_rollouts = counted

    sharded = [False]
    real_save = saves.save_final

    def save_final(trainer, output_dir):
        from safetensors.torch import save_file

        sharded[0] = bool(trainer.is_fsdp_enabled)
        state = trainer.accelerator.get_state_dict(trainer.model)  # collective under FSDP
        if trainer.accelerator.is_main_process:
            save_file({k: v.contiguous() for k, v in state.items()}, out / "trained.safetensors")
        return real_save(trainer, output_dir)

    saves.save_final = save_final
    backends = toy.local_backends(toy.corpus())
    backends.judge = RandomJudge(dist.rank())

    result = grpo.run_grpo(
        grpo.GRPORunConfig(
            **run_fields(tiny, data, out, logs, "lockstep"),
            learning_rate=1e-2,
            n_agent=2,
            batch_size=4,
            max_steps=2,
            save_steps=2,
            episode=EpisodeConfig(
                max_turns=3,
                max_turn_tokens=8,
                max_completion_tokens=96,
                obs_max_tokens=8,
                force_completion=False,
            ),
            rewards=RewardOverrides(reward="judge-only"),
        ),
        backends,
    )
    record = {
        "rank": dist.rank(),
        "turns": calls,
        "idle": idled[0],
        "logged": result.rollouts_logged,
        "fsdp": sharded[0],
    }
    (out / f"rank{dist.rank()}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    run_rank(main)
