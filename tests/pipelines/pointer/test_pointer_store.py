"""The embedding store: pools by cosine, safetensors/Parquet round trips, the embed step."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from ddai.pipelines.pointer.embed import EmbedConfig, run_embed
from ddai.pipelines.pointer.store import build_store, load_store, save_store, top_k_pools
from ddai.pipelines.pointer.world import WorldConfig, make_world, write_world
from ddai.pipelines.store import manifest


def test_top_k_pools_by_hand():
    q = np.array([[1.0, 0.0], [0.0, 2.0]])
    d = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [-1.0, 0.0]])
    rows, sims = top_k_pools(q, d, 3)
    # query 0: cosines 1, .6, 0, -1; query 1 (norm ignored): 0, .8, 1, 0 (tie: lower row first)
    assert rows.tolist() == [[0, 1, 2], [2, 1, 0]]
    assert np.allclose(sims, [[1.0, 0.6, 0.0], [1.0, 0.8, 0.0]])
    excl = np.zeros((2, 4), dtype=bool)
    excl[0, 0] = True
    assert top_k_pools(q, d, 2, excl)[0].tolist() == [[1, 2], [2, 1]]
    with pytest.raises(ValueError, match="k must be"):
        top_k_pools(q, d, 5)


def test_a_demonstration_never_pools_itself():
    emb = np.eye(4)[:, :3] + 0.01
    store = build_store(["a", "b", "c"], emb[:3], ["a", "b", "c", "x"], emb, 2)
    assert all(qid not in pool for qid, pool in zip(store.query_ids, store.cand_ids, strict=True))


@pytest.mark.parametrize("suffix", [".safetensors", ".parquet"])
def test_store_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(0)
    q, d = rng.standard_normal((5, 8)), rng.standard_normal((12, 8))
    store = build_store(
        [f"q{i}" for i in range(5)], q, [f"d{i}" for i in range(12)], d, 4, meta={"embedder": "t"}
    )
    path = tmp_path / f"store{suffix}"
    save_store(store, path)
    back = load_store(path)
    assert back.query_ids == store.query_ids and back.cand_ids == store.cand_ids
    assert np.array_equal(back.query_emb, store.query_emb)
    assert np.array_equal(back.cand_emb, store.cand_emb)  # [N, K, d] in pool order
    assert np.allclose(back.cand_sim, store.cand_sim)
    assert back.meta["embedder"] == "t" and back.k == 4 and back.dim == 8
    qe, ce = back["q3"]
    nearest = int(store.cand_ids[3][0].removeprefix("d"))
    assert np.array_equal(ce[0], d[nearest].astype(np.float32))
    assert np.array_equal(qe, q[3].astype(np.float32))


def test_loading_something_else_fails_clearly(tmp_path):
    other = tmp_path / "x.safetensors"
    save_file({"w": np.zeros(2, np.float32)}, str(other))
    with pytest.raises(ValueError, match="not a ddai pointer embedding store"):
        load_store(other)
    with pytest.raises(FileNotFoundError, match="ddai pointer embed"):
        load_store(tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match=r"\.safetensors or \.parquet"):
        EmbedConfig(world=tmp_path, out=tmp_path / "s.pt")


@pytest.fixture(scope="module")
def world_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("world")
    write_world(make_world(WorldConfig(seed=1, n_queries=30, n_demos=60)), path)
    return path


def test_embed_with_the_world_embeddings(world_dir, tmp_path):
    out = tmp_path / "s.safetensors"
    info = run_embed(EmbedConfig(world=world_dir, out=out, k=8, progress=False))
    store = load_store(out)
    assert info["queries"] == len(store) == 30 and store.k == 8
    # sorted by similarity, most similar first
    assert np.all(np.diff(store.cand_sim, axis=1) <= 1e-6)
    assert manifest.read(out)["step"] == "pointer.embed"
    assert "skipped" in run_embed(EmbedConfig(world=world_dir, out=out, k=8, progress=False))
    assert "skipped" not in run_embed(EmbedConfig(world=world_dir, out=out, k=6, progress=False))


def test_embed_with_an_embedder_backend(world_dir, tmp_path):
    out = tmp_path / "s.parquet"
    run_embed(EmbedConfig(world=world_dir, out=out, k=4, embedder="hash", progress=False))
    store = load_store(out)
    assert store.k == 4 and store.meta["embedder"] == "hash"
    assert np.allclose(np.linalg.norm(store.query_emb, axis=1), 1.0, atol=1e-4)


def test_embed_with_a_keyless_remote_embedder_is_refused_before_any_work(
    world_dir, tmp_path, monkeypatch
):
    """An OpenAI embedder whose key variable is unset (no ``base_url``): exit 2 naming the variable
    and ``--embedder local``, no store, no call cache; ``--dry-run`` (no call) still plans."""
    import json

    from support.backends import keyless_backend
    from typer.testing import CliRunner

    from ddai.cli.app import app

    var = "DDAI_TEST_UNSET_EMBED_KEY"
    keyless_backend(tmp_path, monkeypatch, "oai", "openai", "emb", var)
    before = sorted(tmp_path.rglob("*"))
    args = ["pointer", "embed", str(world_dir), "--out", str(tmp_path / "s.parquet")]
    res = CliRunner().invoke(app, [*args, "--embedder", "oai"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"${var}" in text and "--embedder local (minilm" in text, text
    assert sorted(tmp_path.rglob("*")) == before
    res = CliRunner().invoke(app, [*args, "--embedder", "oai", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)  # 30 queries + 60 demonstrations, repeated texts sent once
    assert plan["items"] == 90 and plan["to_call"] + plan["duplicates"] == 90


def test_a_k_above_the_demonstrations_is_capped_with_a_note(world_dir, tmp_path):
    info = run_embed(
        EmbedConfig(world=world_dir, out=tmp_path / "s.parquet", k=300, progress=False)
    )
    assert info["k"] == 60
    assert info["note"] == "--k 300 is more than the world's 60 demonstrations: k 60"
    info = run_embed(EmbedConfig(world=world_dir, out=tmp_path / "t.parquet", k=8, progress=False))
    assert "note" not in info


_SAVE = """
import sys
import numpy as np
from ddai.pipelines.pointer.store import build_store, save_store
rng = np.random.default_rng(0)
q, d = rng.standard_normal((5, 8)), rng.standard_normal((12, 8))
ids = [f"d{i}" for i in range(12)]
meta = {"embedder": "t", "world": "/w", "z": "1", "a": "2", "m": "é\\n\\\\"}
save_store(build_store([f"q{i}" for i in range(5)], q, ids, d, 4, meta=meta), sys.argv[1])
"""


@pytest.mark.parametrize("suffix", [".safetensors", ".parquet"])
def test_the_same_store_saved_twice_is_byte_identical(tmp_path, suffix):
    """Two processes (each with its own hash seeds) save the same store: the same bytes, so the
    store's sha256 in a manifest or lineage stays put on a re-embed of the same inputs."""
    import os
    import subprocess
    import sys

    paths = [tmp_path / f"{i}{suffix}" for i in range(2)]
    for seed, path in enumerate(paths):
        env = {**os.environ, "PYTHONHASHSEED": str(seed + 1)}
        subprocess.run([sys.executable, "-c", _SAVE, str(path)], check=True, env=env)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    back = load_store(paths[0])
    assert back.meta["m"] == "é\n\\" and back.meta["z"] == "1" and back.k == 4
    assert back.cand_ids == load_store(paths[1]).cand_ids
