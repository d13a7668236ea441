"""A PPO run for ``accelerate launch`` in the multi-process tests: after every update each rank
records whether the policy's and the critic's weights were sharded (FSDP2 DTensors) and how many
generation calls it made; the main process writes the trained weights, gathered through the
trainer's accelerator, to ``trained_policy.safetensors`` and ``trained_critic.safetensors``
(the last update's), for the test to compare with what the run saved.

    accelerate launch --config_file fsdp.yaml --num_processes 2 tests/trainer/ppo/dist_ppo_worker.py \
        TINY TOY OUT LOGS MAX_STEPS [--resume]
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/: launched as a script, not by pytest
from support.toy_world import run_fields, run_rank

from ddai.pipelines.backends import JudgeResult
from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.ppo import sharding
from ddai.trainer.ppo import train as ppo
from ddai.trainer.runtime import dist


class HashJudge:
    """Scores from a hash of the request: spread over [0, 1] (reward variance wherever two
    rollouts' answers differ) and the same on every replay, so a resumed run sees the scores an
    uninterrupted one did."""

    name = "hash"

    async def judge(self, reqs):
        return [
            JudgeResult(score=zlib.crc32(f"{r.question}|{r.answer}".encode()) % 1000 / 999)
            for r in reqs
        ]


def main() -> None:
    tiny, data, out, logs = (Path(a) for a in sys.argv[1:5])
    max_steps, resume = int(sys.argv[5]), "--resume" in sys.argv[6:]
    record = {"sharded": [], "generations": 0}

    real_update = ppo.ppo_update

    def update(policy, critic, exp, policy_opt, critic_opt, cfg, gen, accelerator):
        from safetensors.torch import save_file
        from torch.distributed.tensor import DTensor

        metrics = real_update(policy, critic, exp, policy_opt, critic_opt, cfg, gen, accelerator)
        record["sharded"].append(
            [all(isinstance(p, DTensor) for p in m.parameters()) for m in (policy, critic)]
        )
        for name, model in (("policy", policy), ("critic", critic)):
            state = accelerator.get_state_dict(model)  # a collective under FSDP
            if accelerator.is_main_process:
                state = {k: v.contiguous() for k, v in state.items()}
                save_file(state, out / f"trained_{name}.safetensors")
        return metrics

    ppo.ppo_update = update
    real_generation = sharding.generation_model

    def generation_model(policy, acc):
        record["generations"] += 1
        return real_generation(policy, acc)

    sharding.generation_model = generation_model
    backends = toy.local_backends(toy.corpus())
    backends.judge = HashJudge()
    result = ppo.run_ppo(
        ppo.PPORunConfig(
            **run_fields(tiny, data, out, logs, "fsdp_ppo"),
            n_agent=2,
            batch_size=4,
            mini_batch_size=2,
            ppo_epochs=2,
            max_steps=max_steps,
            learning_rate=1e-2,
            critic_lr=1e-2,
            critic_trunk_lr=1e-3,
            save_steps=1,
            resume=resume,
            progress=False,
            episode=EpisodeConfig(
                max_turns=2, max_turn_tokens=8, max_completion_tokens=40, obs_max_tokens=8
            ),
            rewards=RewardOverrides(reward="judge-only"),
        ),
        backends,
    )
    record["rank"] = dist.rank()  # the process group exists once the run has started
    record["logged"] = result.rollouts_logged
    record["changed"] = result.changed_parameters
    (out / f"rank{dist.rank()}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    run_rank(main)
