"""Training: phases, SFT from labels, and RL from generated data improving held-out selections."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from support.lazy import heavy, torch

from ddai.pipelines.backends import get_backend
from ddai.pipelines.backends.vqa_simulator import VQASimulator
from ddai.pipelines.pointer import vqa
from ddai.pipelines.pointer.records import query_record
from ddai.pipelines.pointer.store import build_store
from ddai.pipelines.pointer.world import WorldConfig, make_world

decode = heavy("ddai.trainer.pointer.decode")
pointer_data = heavy("ddai.trainer.pointer.data")
generate = heavy("ddai.trainer.pointer.generate")
pointer_model = heavy("ddai.trainer.pointer.model")
pointer_train = heavy("ddai.trainer.pointer.train")


# tiny models train faster on one thread than fighting over two
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_parse_phases():
    assert pointer_train.parse_phases("rce:1,clipped-group:3") == [("rce", 1), ("clipped-group", 3)]
    assert pointer_train.parse_phases(" reinforcepp ") == [("reinforcepp", 1)]
    with pytest.raises(ValueError, match="known: sft, rce, clipped-group, reinforcepp"):
        pointer_train.parse_phases("rce:1,ppo:2")
    with pytest.raises(ValueError, match="integer"):
        pointer_train.parse_phases("clipped-group:x")
    with pytest.raises(ValueError, match="cannot share"):
        pointer_train.parse_phases("sft:3,clipped-group:1")


def _random_store(query_ids: list[str], n_demos: int, k: int):
    """A store of seed-0 random 4-d embeddings for ``query_ids`` and demos ``d0``…, ``k`` candidates
    a query."""
    rng = np.random.default_rng(0)
    demo_ids = [f"d{i}" for i in range(n_demos)]
    return build_store(
        query_ids, rng.standard_normal((len(query_ids), 4)), demo_ids,
        rng.standard_normal((n_demos, 4)), k,
    )  # fmt: skip


def test_labels_outside_the_pool_are_dropped():
    store = _random_store(["q0", "q1"], 6, 3)
    pool = store.cand_ids[0]
    rows, ptrs, dropped = pointer_data.label_pointers(
        {"q0": [pool[2], pool[0]], "q1": ["d-none", pool[0]]}, store, ["q0", "q1", "q9"]
    )
    assert rows.tolist() == [0] and ptrs.tolist() == [[2, 0]] and dropped == 2


# ---------------------------------------------------------------- the RL pipeline, end to end


def _expected_accuracy(model, store, rows, world_q, demos, sim) -> float:
    """Mean simulator p(correct) of the model's greedy pairs (noise-free held-out accuracy)."""
    q, c = torch.from_numpy(store.query_emb[rows]), torch.from_numpy(store.cand_emb[rows])
    ps = []
    for r, (a, b) in zip(rows, decode.greedy(model, q, c).tolist(), strict=True):
        pool = store.cand_ids[r]
        ps.append(sim.p_correct([demos[pool[a]], demos[pool[b]]], world_q[store.query_ids[r]]))
    return float(np.mean(ps))


@pytest.mark.slow
def test_rce_then_grpo_and_rce_then_reinforcepp_beat_sft_on_held_out_queries():
    torch.manual_seed(0)
    world = make_world(WorldConfig(seed=5, n_queries=240, n_demos=400))
    store = build_store(
        [q["query_id"] for q in world.queries], world.query_emb,
        [d["demo_id"] for d in world.demos], world.demo_emb, 16,
    )  # fmt: skip
    qa, ca = torch.from_numpy(store.query_emb), torch.from_numpy(store.cand_emb)
    by_id = {q["query_id"]: q for q in world.queries}
    demos = {d["demo_id"]: d for d in world.demos}
    train = [q["query_id"] for q in world.queries if q["split"] == "train"]
    test_rows = [store.row(q["query_id"]) for q in world.queries if q["split"] == "test"]

    sft = pointer_model.PointerSelector(pointer_model.PointerConfig(d_in=store.dim))
    rows, ptrs, _ = pointer_data.label_pointers(world.labels, store, train)
    before = [p.detach().clone() for p in sft.parameters()]
    hist = pointer_train.fit_sft(
        sft, qa, ca, rows, ptrs, epochs=20, optim=pointer_train.OptimConfig(lr=3e-3)
    )
    assert hist[-1]["sft/nll"] < hist[0]["sft/nll"] - 0.5
    assert all(not torch.equal(a, b) for a, b in zip(before, sft.parameters(), strict=True))

    # generation + correctness from the local simulator backend, as `ddai pointer gen` does
    sub = store.subset(train)
    cands = generate.propose(
        sft,
        torch.from_numpy(sub.query_emb),
        torch.from_numpy(sub.cand_emb),
        generate.ProposalConfig(),
    )
    items = [
        (by_id[q], [demos[pool[x.pointer[0]]], demos[pool[x.pointer[1]]]])
        for q, pool, cs in zip(train, sub.cand_ids, cands, strict=True)
        for x in cs
    ]
    outcomes = iter(vqa.evaluate(get_backend("vqa", "local", cache=False), items))
    for cs in cands:
        for x in cs:
            o = next(outcomes)
            x.vqa_pred_answer, x.vqa_acc_score, x.vqa_correct = (
                o.pred_answer,
                o.acc_score,
                o.correct,
            )
    raw = [
        query_record(by_id[q], pool, cs)
        for q, pool, cs in zip(train, sub.cand_ids, cands, strict=True)
    ]
    df, dropped = pointer_data.process_records(raw, pointer_data.RewardConfig())
    assert dropped == {} and set(df["reward"].unique().to_list()) <= {-1.0, 1.0}
    data = pointer_data.grouped_rows(df, store)

    sim = VQASimulator()
    base = _expected_accuracy(sft, store, test_rows, by_id, demos, sim)
    for mode in ("clipped-group", "reinforcepp"):
        model = pointer_model.PointerSelector(sft.cfg)
        model.load_state_dict(sft.state_dict())
        pointer_train.fit_rl(
            model,
            qa,
            ca,
            data,
            [("rce", 3), (mode, 15)],
            optim=pointer_train.OptimConfig(lr=1e-3, batch_queries=8, weight_decay=1e-2),
            rl=pointer_train.RLConfig(),
        )
        assert _expected_accuracy(model, store, test_rows, by_id, demos, sim) > base + 0.05, mode


def test_grouped_rows_keep_groups_contiguous():
    store = _random_store(["a", "b"], 5, 4)
    df = pl.DataFrame(
        {
            "query_id": ["b", "a", "b"],
            "pointer": [[0, 1], [1, 2], [2, 3]],
            "reward": [1.0, -1.0, 0.5],
            "logprob_score": [-1.0, -2.0, None],
        }
    )
    data = pointer_data.grouped_rows(df, store)
    assert data.store_row.tolist() == [0, 1, 1] and data.group.tolist() == [0, 1, 1]
    assert data.pointers.tolist() == [[1, 2], [0, 1], [2, 3]] and data.starts.tolist() == [0, 1, 3]
    assert torch.isnan(data.old_logp[2])
    with pytest.raises(ValueError, match="no logprob_score"):
        pointer_train.fit_rl(
            pointer_model.PointerSelector(pointer_model.PointerConfig(d_in=4)),
            torch.from_numpy(store.query_emb),
            torch.from_numpy(store.cand_emb),
            data,
            [("clipped-group", 1)],
            optim=pointer_train.OptimConfig(),
            rl=pointer_train.RLConfig(old_logp="stored"),
        )
    with pytest.raises(ValueError, match="not in the embedding store"):
        pointer_data.grouped_rows(df.with_columns(pl.lit("zz").alias("query_id")), store)


def test_beam_quality_names_the_rows_without_a_beam_score():
    """``--quality beam``: a sampled pointer (no ``beam_score``) counts quality 0, above every
    beam's log-probability; the summary counts such rows and says why their reward is higher."""
    from ddai.trainer.pointer import data as pointer_data
    from ddai.trainer.pointer.config import RewardConfig

    df = pl.DataFrame(
        {
            "vqa_correct": [1, 1, 1],
            "vqa_acc_score": [1.0, 1.0, 1.0],
            "beam_score": [-2.0, -0.5, None],
            "logprob_score": [-2.0, -0.5, -3.0],
        }
    )
    beam = pointer_data.add_rewards(df, RewardConfig(quality="beam", alpha=0.2, beta=1.0))
    # 0.2·q + 1·(2·1 − 1): the sampled row's missing score counts 0, the highest reward
    assert beam["reward"].to_list() == pytest.approx([0.6, 0.9, 1.0], abs=1e-12)
    gaps = pointer_data.quality_gaps(df, "beam")
    assert gaps["quality missing"] == 1 and "1 of 3 rows have no beam_score" in gaps["note"]
    assert pointer_data.quality_gaps(df, "logprob") == {}
    assert pointer_data.quality_gaps(df, "none") == {}


RL_ALTERNATIVES = {
    "norm": "minmax",
    "adv_clip": 0.05,
    "clip_eps": 0.01,
    "kl_coef": 5.0,
    "rce_t_start": 9.0,
    "rce_t_end": 0.05,
    "old_logp": "stored",
    "reinforcepp_clip": False,
}


def test_each_rl_phase_reads_exactly_the_settings_its_table_row_names():
    # PHASE_READS is what PointerTrainConfig.check refuses by: a setting it leaves out must not
    # move the weights, and one it names must.
    from dataclasses import fields, replace

    from ddai.trainer.pointer.config import PHASE_READS, RL_MODES, phase_reads

    assert set(RL_ALTERNATIVES) == {f.name for f in fields(pointer_train.RLConfig)}
    ids = ["a", "b", "c", "e"]
    store = _random_store(ids, 5, 4)
    rng = np.random.default_rng(1)
    df = pl.DataFrame(
        {
            "query_id": [q for q in ids for _ in range(3)],
            "pointer": [[0, 1], [1, 2], [2, 3]] * len(ids),
            "reward": rng.standard_normal(3 * len(ids)).tolist(),
            "logprob_score": (rng.standard_normal(3 * len(ids)) - 3.0).tolist(),
        }
    )
    data = pointer_data.grouped_rows(df, store)

    def trained(mode: str, rl) -> dict:
        torch.manual_seed(0)
        model = pointer_model.PointerSelector(pointer_model.PointerConfig(d_in=4, d_model=8))
        pointer_train.fit_rl(
            model, torch.from_numpy(store.query_emb), torch.from_numpy(store.cand_emb), data,
            [(mode, 3)], optim=pointer_train.OptimConfig(lr=0.1, batch_queries=1),
            rl=rl,
        )  # fmt: skip
        return model.state_dict()

    for mode in RL_MODES:
        for base in (pointer_train.RLConfig(), pointer_train.RLConfig(reinforcepp_clip=False)):
            ref = trained(mode, base)
            for name, value in RL_ALTERNATIVES.items():
                if name == "reinforcepp_clip" and not base.reinforcepp_clip:
                    continue
                moved = trained(mode, replace(base, **{name: value}))
                changed = any(not torch.equal(ref[k], moved[k]) for k in ref)
                assert changed == (name in phase_reads(mode, base)), (mode, base, name)
    assert set(phase_reads("reinforcepp", pointer_train.RLConfig())) == set(
        PHASE_READS["reinforcepp"]
    )
