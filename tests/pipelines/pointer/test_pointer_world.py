"""The synthetic VQA world: deterministic, answerable, with visible structure and weak labels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ddai.pipelines.backends.vqa_simulator import VQASimulator
from ddai.pipelines.pointer.world import (
    WorldConfig,
    load_world,
    make_world,
    similarity_top2,
    write_world,
)
from ddai.pipelines.records.metrics import vqa_accuracy_symmetric
from ddai.pipelines.store import manifest

SMALL = WorldConfig(seed=3, n_queries=120, n_demos=200)


@pytest.fixture(scope="module")
def world():
    return make_world(SMALL)


def test_same_seed_same_world_other_seed_other_world(world):
    again = make_world(SMALL)
    assert again.queries == world.queries and again.demos == world.demos
    assert np.array_equal(again.query_emb, world.query_emb)
    other = make_world(WorldConfig(seed=4, n_queries=120, n_demos=200))
    assert other.queries != world.queries


def test_every_query_has_ten_answers_its_answer_scores_full_and_its_distractor_zero(world):
    # annotators write "two" or "2", "a dog" or "dog": the world's answer is right under the
    # symmetric normalization; the official script counts only literal matches
    for q in world.queries:
        assert len(q["answers"]) == 10
        assert vqa_accuracy_symmetric(q["answer"], q["answers"]) == 1.0
        if q["answer_type"] != "yesno":  # yes/no's only wrong answer is a minority answer
            assert vqa_accuracy_symmetric(q["distractor"], q["answers"]) == 0.0
    splits = {q["split"] for q in world.queries}
    assert splits == {"train", "test"}
    assert sum(q["split"] == "test" for q in world.queries) == round(120 * SMALL.test_frac)


def test_embeddings_show_answer_type_and_label_quality(world):
    assert np.allclose(np.linalg.norm(world.query_emb, axis=1), 1.0, atol=1e-5)
    sims = world.query_emb @ world.demo_emb.T  # [Q, D]
    same_topic = np.array([[q["topic"] == d["topic"] for d in world.demos] for q in world.queries])
    same_type = np.array(
        [[q["answer_type"] == d["answer_type"] for d in world.demos] for q in world.queries]
    )
    # within a topic, the query's answer type is more similar than the other types
    assert sims[same_topic & same_type].mean() > sims[same_topic & ~same_type].mean() + 0.05
    # clean and noisy demonstrations separate along one direction: a least-squares probe on the
    # demonstration embeddings recovers cleanliness nearly perfectly
    clean = np.array([d["clean"] for d in world.demos], dtype=float)
    x = np.c_[world.demo_emb, np.ones(len(clean))]
    w, *_ = np.linalg.lstsq(x, 2 * clean - 1, rcond=None)
    assert ((x @ w > 0) == (clean > 0)).mean() > 0.95


def test_labels_are_the_two_nearest_and_deliberately_suboptimal(world):
    top2 = similarity_top2(world.query_emb, world.demo_emb)
    ids = [d["demo_id"] for d in world.demos]
    for q, row in zip(world.queries, top2, strict=True):
        assert world.labels[q["query_id"]] == [ids[row[0]], ids[row[1]]]
    # the simulator's expected correctness of the labeled pair vs the best pair among the 16
    # nearest demonstrations: the labels leave clear headroom
    sim = VQASimulator()
    demos = {d["demo_id"]: d for d in world.demos}
    near = np.argsort(-(world.query_emb @ world.demo_emb.T), axis=1)[:, :16]
    label_p, best_p = [], []
    for q, row in zip(world.queries, near, strict=True):
        label_p.append(sim.p_correct([demos[i] for i in world.labels[q["query_id"]]], q))
        pool = [world.demos[j] for j in row]
        best_p.append(max(sim.p_correct([a, b], q) for a, b in itertools.combinations(pool, 2)))
    assert np.mean(best_p) > np.mean(label_p) + 0.2


def test_write_and_load_round_trip(world, tmp_path):
    paths = write_world(world, tmp_path / "w")
    back = load_world(tmp_path / "w")
    assert back.queries == world.queries and back.demos == world.demos
    assert back.labels == world.labels and back.config == world.config
    assert np.array_equal(back.demo_emb, world.demo_emb)
    for path in paths.values():
        assert manifest.read(path)["step"] == "pointer.world"


def test_load_world_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="ddai pointer world"):
        load_world(tmp_path)


@pytest.mark.parametrize(
    ("name", "damage", "said"),
    [
        ("embeddings.safetensors", b"garbage", "not a readable safetensors file"),
        ("queries.jsonl", b'{"query_id": "q0"}\n{bad\n', "queries.jsonl:2: not a JSON line"),
        ("demos.jsonl", b'["a list"]\n', "demos.jsonl:1: not a JSON object"),
    ],
)
def test_a_damaged_world_file_is_named_with_the_fix(world, tmp_path, name, damage, said):
    """A world file cut or overwritten is a ValueError naming the file (and line), not
    safetensors' or json's bare error."""
    write_world(world, tmp_path / "w")
    (tmp_path / "w" / name).write_bytes(damage)
    with pytest.raises(ValueError, match="ddai pointer world") as err:
        load_world(tmp_path / "w")
    assert said in str(err.value) and str(tmp_path / "w" / name) in str(err.value)


def test_world_embeddings_without_a_tensor_are_named(world, tmp_path):
    from safetensors.numpy import save_file

    write_world(world, tmp_path / "w")
    save_file({"query_emb": world.query_emb}, str(tmp_path / "w" / "embeddings.safetensors"))
    with pytest.raises(ValueError, match="no demo_emb tensor"):
        load_world(tmp_path / "w")


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="n_topics"):
        WorldConfig(n_topics=99)
