"""Seed 002's example record (§2.1) through ``pointer process`` and the RL advantages, against
values computed by hand from the seed's own formulas (§3.4 reward, §4.4.1 advantage)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from support.lazy import heavy, torch
from support.pointer_seed002 import SEED_RECORD

from ddai.pipelines.pointer.store import build_store

losses = heavy("ddai.trainer.pointer.losses")
pointer_data = heavy("ddai.trainer.pointer.data")
pointer_model = heavy("ddai.trainer.pointer.model")
pointer_train = heavy("ddai.trainer.pointer.train")
config = heavy("ddai.trainer.pointer.config")

# §3.4 with its defaults (alpha 0.2, beta 1, pm1, use_logprob False: quality = beam_score where
# there is one, else 0): beam 0.2·2.13 + 1 = 1.426, sample 0 + 1 = 1, random 0 − 1 = −1
SEED_REWARDS = [1.426, 1.0, -1.0]


def _rewards(**reward):
    df, dropped = pointer_data.process_records([SEED_RECORD], config.RewardConfig(**reward))
    assert dropped == {}
    return df


def test_the_seeds_example_gets_the_seeds_rewards():
    df = _rewards(quality="beam")
    # §2.2's processed row: every field it names, the seed's values carried through
    seed_fields = ["query_id", "pointer", "gen_method", "beam_score", "logprob_score",
                   "vqa_correct", "vqa_acc_score", "reward"]  # fmt: skip
    assert set(seed_fields) <= set(df.columns)
    beam = {k: v for k, v in df.row(0, named=True).items() if k in seed_fields[:-1]}
    assert beam == {
        "query_id": "12345", "pointer": [7, 22], "gen_method": "beam", "beam_score": 2.13,
        "logprob_score": -1.56, "vqa_correct": 1, "vqa_acc_score": 1.0,
    }  # fmt: skip
    assert df["gen_method"].to_list() == ["beam", "sample", "random"]
    assert df["reward"].to_list() == pytest.approx(SEED_REWARDS, abs=1e-12)
    # soft correctness (vqa_acc_score, pm1): the sample's 0.9 counts 2·0.9 − 1 = 0.8
    soft = _rewards(quality="beam", use_acc_score=True)
    assert soft["reward"].to_list() == pytest.approx([1.426, 0.8, -1.0], abs=1e-12)
    # 01 correctness without quality: the correctness itself
    assert _rewards(correctness_mode="01")["reward"].to_list() == [1.0, 1.0, 0.0]


def test_the_seeds_example_gets_the_seeds_group_advantages():
    r, g = torch.tensor(SEED_REWARDS, dtype=torch.float64), torch.zeros(3, dtype=torch.long)
    # z-score: mean 1.426/3 = 0.475333, unbiased std sqrt(3.355651/2) = 1.295309;
    # minus the group mean of z (0), within the ±5 clip
    adv = losses.clipped_group_advantages(r, g, norm="zscore", clip=5.0)
    assert adv.tolist() == pytest.approx([0.733930, 0.405051, -1.138982], abs=1e-5)
    # min-max: (r − (−1)) / 2.426 = 1, 0.824402, 0; minus their mean 0.608134
    adv = losses.clipped_group_advantages(r, g, norm="minmax", clip=5.0)
    assert adv.tolist() == pytest.approx([0.391866, 0.216268, -0.608134], abs=1e-5)
    # RCE's weights at the warm-up's first temperature (2.0) on the z-scored rewards:
    # softmax(z / 2) = 0.446352, 0.378671, 0.174977
    z = losses.group_normalize(r, g, "zscore")
    w = losses.group_softmax(z / 2.0, g)
    assert w.tolist() == pytest.approx([0.446352, 0.378671, 0.174977], abs=1e-5)


def test_the_rce_warm_up_cools_from_2_to_half_across_the_whole_phase():
    """Seed 002 §4.3: rce_temperature falls linearly from 2.0 to 0.5 over the warm-up. Three
    epochs of two steps (two queries a step, four queries): the steps' temperatures are
    2.0, 1.7, 1.4, 1.1, 0.8, 0.5, so the epochs' means are 1.85, 1.25, 0.65."""
    rng = np.random.default_rng(0)
    ids = ["a", "b", "c", "d"]
    store = build_store(
        ids, rng.standard_normal((4, 4)), [f"d{i}" for i in range(6)],
        rng.standard_normal((6, 4)), 4,
    )  # fmt: skip
    df = pl.DataFrame(
        {
            "query_id": [q for q in ids for _ in range(2)],
            "pointer": [[0, 1], [2, 3]] * 4,
            "reward": [1.0, -1.0] * 4,
            "logprob_score": [-1.0, -2.0] * 4,
        }
    )
    data = pointer_data.grouped_rows(df, store)
    history = pointer_train.fit_rl(
        pointer_model.PointerSelector(pointer_model.PointerConfig(d_in=4)),
        torch.from_numpy(store.query_emb),
        torch.from_numpy(store.cand_emb),
        data,
        [("rce", 3)],
        optim=config.OptimConfig(batch_queries=2),
        rl=config.RLConfig(),
    )
    temps = [h["rce/temperature"] for h in history]
    assert temps == pytest.approx([1.85, 1.25, 0.65], abs=1e-9)
