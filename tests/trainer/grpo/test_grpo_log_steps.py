"""A GRPO run writes its rollout log through one ``RolloutLog``: each optimizer step's rollouts in
one commit, so the run's manifest lists every step once, also when a step's rollouts come from
several generations (gradient accumulation)."""

from __future__ import annotations

from support.toy_world import QUIET, run_fields, tiny_on_toy

from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides


def test_grpo_manifest_lists_each_step_once(tmp_path):
    from ddai.pipelines.backends import get_backend
    from ddai.pipelines.store import read_rollouts, run_manifest
    from ddai.trainer.episode.logrows import logged_steps
    from ddai.trainer.grpo.train import Backends, GRPORunConfig, run_grpo

    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")
    cfg = GRPORunConfig(
        **run_fields(tiny, data, tmp_path / "grpo", tmp_path / "logs", "grpo_steps"),
        n_agent=2,
        batch_size=2,
        max_steps=3,
        learning_rate=1e-3,
        **QUIET,
        # two micro-batches per optimizer step: two rollout calls that log the same step
        overrides={"gradient_accumulation_steps": 2, "steps_per_generation": 1},
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=8, max_completion_tokens=48, obs_max_tokens=8
        ),
        rewards=RewardOverrides(reward="ddai-phase1"),  # NDCG only: no generator or judge
    )
    backends = Backends(search=get_backend("search", "local", corpus=toy.corpus(), cache=False))
    result = run_grpo(cfg, backends)
    man = run_manifest(tmp_path / "logs", "grpo_steps")
    assert logged_steps(man) == [1, 2, 3]
    assert len(man["history"]) == 2  # one commit per step (six before: one per rollout call)
    rows = read_rollouts(tmp_path / "logs", ["grpo_steps"]).to_pylist()
    assert sorted(r["step"] for r in rows) == [1] * 4 + [2] * 4 + [3] * 4
    # two rollout calls of 2 rollouts each per step, logged as that step's 4 rows
    assert result.rollouts_logged == 12 and result.reward_first is not None
