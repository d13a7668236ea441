"""``ddai train ppo --resume`` is exact: 2 steps, then a resumed run to step 4, equals 4 steps
straight: every rollout logged (text, rewards, advantages) and every weight tensor of the policy
and the critic bit-identical. Every random state the loop consumes (torch's, python's, the update's
shuffling generator, the prompt order) is saved in the checkpoint and restored."""

from __future__ import annotations

import json

import pytest
from support.lazy import heavy, safetensors_torch, torch
from support.toy_world import make_world, run_fields

from ddai.pipelines.store import read_rollouts
from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

ck = heavy("ddai.trainer.ppo.checkpoint")
rng = heavy("ddai.trainer.ppo.rng")
train = heavy("ddai.trainer.ppo.train")


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ppo_exact"), hidden_size=32)


def _cfg(root, data, tiny, tag: str, **kw) -> train.PPORunConfig:
    base = dict(
        **run_fields(tiny, data, root / tag, root / f"{tag}-logs", "exact"),
        rewards=RewardOverrides(reward="ddai-phase1"),
        n_agent=2,
        batch_size=4,
        mini_batch_size=2,  # the update shuffles: its generator's state matters
        ppo_epochs=2,
        learning_rate=1e-3,
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=10, max_completion_tokens=48, obs_max_tokens=10
        ),
        progress=False,
        skip_preflight=True,
        limit=3,  # 2 prompts a step over 3: the order reshuffles mid-run
    )
    return train.PPORunConfig(**{**base, **kw})


def _rows(logs) -> list[dict]:
    """The logged rows in (step, sample) order, less ``extra.episode_key`` (a fresh uuid per
    episode, the score store's handle: no outcome of the run)."""
    rows = read_rollouts(logs, ["exact"]).to_pylist()
    for r in rows:
        extra = json.loads(r["extra"])
        assert extra.pop("episode_key")
        r["extra"] = extra
    return sorted(rows, key=lambda r: (r["step"], r["sample_idx"]))


def _weights(out) -> dict[str, torch.Tensor]:
    """Every saved tensor: the policy's and the critic's (head, and trunk when it trained)."""
    files = [out / "model.safetensors", *sorted((out / ck.CRITIC_DIR).rglob("*.safetensors"))]
    return {
        f"{f.relative_to(out)}:{k}": v
        for f in files
        for k, v in safetensors_torch.load_file(f).items()
    }


@pytest.mark.slow
def test_two_plus_two_resumed_steps_equal_four_steps(toy_world):
    root, data, tiny = toy_world
    backends = toy.local_backends(toy.corpus())
    straight_result = train.run_ppo(_cfg(root, data, tiny, "straight", max_steps=4), backends)
    train.run_ppo(_cfg(root, data, tiny, "resumed", max_steps=2), backends)
    resumed = train.run_ppo(_cfg(root, data, tiny, "resumed", max_steps=4, resume=True), backends)
    assert resumed.resumed_from == 2
    clip = ("clip_frac_mean", "clip_acted_steps", "ratio_spread")  # the whole run's, resumed too
    assert [getattr(resumed, k) for k in clip] == [getattr(straight_result, k) for k in clip]

    straight_rows, resumed_rows = _rows(root / "straight-logs"), _rows(root / "resumed-logs")
    assert [r["step"] for r in straight_rows] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
    assert len(resumed_rows) == len(straight_rows)
    for a, b in zip(straight_rows, resumed_rows, strict=True):
        assert a == b, (a["step"], a["sample_idx"])
    # The rollouts differ from step to step: equality above is not a constant policy's.
    assert len({r["response"] for r in straight_rows}) > 4

    straight, resumed_w = _weights(root / "straight"), _weights(root / "resumed")
    assert straight.keys() == resumed_w.keys() and len(straight) > 10
    assert any(k.startswith("critic") for k in straight)
    unequal = [k for k in straight if not torch.equal(straight[k], resumed_w[k])]
    assert unequal == []
    metrics = [
        [json.loads(x) for x in (root / tag / "metrics.jsonl").read_text().splitlines()]
        for tag in ("straight", "resumed")
    ]
    assert metrics[0] == metrics[1]


def test_rng_state_round_trips_through_the_checkpoint(tmp_path):
    """The saved random states restore every generator the loop draws from: the draws after a
    restore repeat the draws after the save."""
    import random

    gen = torch.Generator().manual_seed(3)
    order = rng.PromptOrder(list(range(5)), 2, seed=7)
    torch.manual_seed(1)
    random.seed(2)
    next(order)
    state = rng.rng_state(gen=gen, order=order)
    torch.save(state, tmp_path / "rng.pt")
    after = (torch.rand(3), random.random(), torch.rand(2, generator=gen), next(order), next(order))
    torch.manual_seed(99)
    random.seed(99)
    gen2 = torch.Generator().manual_seed(99)
    order2 = rng.PromptOrder(list(range(5)), 2, seed=99)
    rng.restore_rng(torch.load(tmp_path / "rng.pt", weights_only=False), gen=gen2, order=order2)
    again = (
        torch.rand(3),
        random.random(),
        torch.rand(2, generator=gen2),
        next(order2),
        next(order2),
    )
    assert torch.equal(after[0], again[0]) and after[1] == again[1]
    assert torch.equal(after[2], again[2]) and after[3:] == again[3:]


def test_a_checkpoint_without_random_states_resumes_on_fresh_seeds_and_says_so(tmp_path):
    from types import SimpleNamespace

    from ddai.trainer.ppo.train import _restore_rng

    acc = SimpleNamespace(num_processes=1, process_index=0)
    order = rng.PromptOrder(list(range(5)), 2, seed=0)
    with pytest.warns(UserWarning, match="no saved random states.*will not repeat"):
        _restore_rng(str(tmp_path), acc, torch.Generator(), order, start=2)
    replayed = rng.PromptOrder(list(range(5)), 2, seed=0)
    next(replayed), next(replayed)
    assert next(order) == next(replayed)  # the data order still continues after step 2
    torch.save([{}, {}], tmp_path / ck.RNG_FILE)  # two ranks' states, one process now
    with pytest.warns(UserWarning, match="2 process"):
        _restore_rng(str(tmp_path), acc, torch.Generator(), order, start=2)
