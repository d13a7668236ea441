"""`ddai pointer world --from` on a small user-shaped file: gen → train → eval run on it, and a
remote VQA model (a fake OpenAI-compatible server) is shown each pair's images in order."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.backends import backend_toml
from support.fakes import FakeModelServer
from typer.testing import CliRunner
from user_set_data import make_user_set

from ddai.cli.app import app
from ddai.pipelines.pointer.store import load_store
from ddai.pipelines.pointer.world import load_world, read_jsonl

runner = CliRunner()


# tiny models train faster on one thread than fighting over two
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ddai(*args: object, code: int = 0) -> dict:
    res = runner.invoke(app, ["pointer", *map(str, args), "--json"])
    assert res.exit_code == code, res.output
    return json.loads(res.stdout) if code == 0 else {"output": res.output}


def test_user_file_runs_gen_train_eval(tmp_path):
    src = make_user_set(tmp_path / "src", 30, fmt="parquet")
    w, store = tmp_path / "w", tmp_path / "store.safetensors"
    made = ddai("world", w, "--from", src, "--demos", 12, "--test-frac", 0.3, "--seed", 0)
    assert (made["queries"], made["demos"], made["train_queries"], made["test_queries"]) == (
        18,
        12,
        13,
        5,
    )
    assert ddai("embed", w, "--out", store, "--k", 6, "--embedder", "hash")["k"] == 6
    sft = ddai(
        "train", "--store", store, "--out", tmp_path / "sft", "--mode", "sft", "--epochs", 2,
        "--world", w,
    )  # fmt: skip
    assert sft["examples"] == 13 and "nearest" in sft["labels"]
    gen = ddai(
        "gen", "--store", store, "--world", w, "--model", tmp_path / "sft", "--out", tmp_path / "raw.jsonl",
        "--num-beams", 2, "--temps", "1.0", "--n-per-temp", 1, "--num-random", 1,
    )  # fmt: skip
    assert gen["queries"] == 13 and gen["eval_failed"] == 0
    ddai("process", tmp_path / "raw.jsonl", "--out", tmp_path / "rl.parquet")
    rl = ddai(
        "train", "--store", store, "--out", tmp_path / "rl", "--phases", "rce:1,clipped-group:1",
        "--data", tmp_path / "rl.parquet", "--init", tmp_path / "sft",
    )  # fmt: skip
    assert rl["tensors_changed"] > 0
    ev = ddai(
        "eval", "--store", store, "--world", w, "--model", f"sft={tmp_path / 'sft'}",
        "--model", f"rl={tmp_path / 'rl'}", "--out", tmp_path / "eval",
    )  # fmt: skip
    assert ev["queries"] == 5 and (tmp_path / "eval" / "summary.parquet").is_file()


def test_remote_vqa_sees_each_pairs_images_in_order(tmp_path, monkeypatch):
    src = make_user_set(tmp_path / "src", 14, split=True)
    w, store = tmp_path / "w", tmp_path / "store.safetensors"
    ddai("world", w, "--from", src)
    ddai("embed", w, "--out", store, "--k", 4, "--embedder", "hash")
    ddai("train", "--store", store, "--out", tmp_path / "sft", "--mode", "sft", "--epochs", 1,
         "--world", w)  # fmt: skip
    with FakeModelServer() as srv:
        monkeypatch.chdir(tmp_path)
        backend_toml(tmp_path, "vlm", srv.openai_base_url, model="fake-vlm")
        gen = ddai(
            "gen", "--store", store, "--world", w, "--model", tmp_path / "sft", "--out",
            tmp_path / "raw.jsonl", "--num-beams", 1, "--temps", "1.0", "--n-per-temp", 1,
            "--num-random", 0, "--vqa", "vlm", "--split", "test",
        )  # fmt: skip
        parts = list(srv.parts)
    assert gen["eval_failed"] == 0 and len(parts) == gen["candidates"]
    world, st = load_world(w), load_store(store)
    sha = {
        r.get("demo_id", r.get("query_id")): hashlib.sha256(
            Path(r["image"]).read_bytes()
        ).hexdigest()
        for r in world.queries + world.demos
    }
    expected = []
    for rec in read_jsonl(tmp_path / "raw.jsonl"):
        pool = st.cand_ids[st.row(rec["query_id"])]
        expected += [
            [sha[pool[c["pointer"][0]]], sha[pool[c["pointer"][1]]], sha[rec["query_id"]]]
            for c in rec["pointer_candidates"]
        ]
    got = [[v for kind, v in p if kind == "image"] for p in parts]
    assert sorted(got) == sorted(expected) and all(len(g) == 3 for g in got)


def test_bad_user_file_exits_2_naming_the_row(tmp_path):
    src = make_user_set(tmp_path / "src", 6)
    lines = src.read_text().splitlines()
    row = json.loads(lines[2])
    row["answers"] = "red"
    lines[2] = json.dumps(row)
    src.write_text("\n".join(lines) + "\n")
    out = ddai("world", tmp_path / "w", "--from", src, code=2)["output"]
    assert "row 3: answers is not a non-empty list" in out
    assert not (tmp_path / "w").exists()


def test_embed_through_a_configured_embedding_server(tmp_path, monkeypatch):
    src = make_user_set(tmp_path / "src", 9, split=True)
    w, store = tmp_path / "w", tmp_path / "store.safetensors"
    ddai("world", w, "--from", src)
    with FakeModelServer() as srv:
        monkeypatch.chdir(tmp_path)
        backend_toml(tmp_path, "vlm2vec", srv.openai_base_url, model="fake-embed", max_retries=0)
        out = ddai("embed", w, "--out", store, "--k", 2, "--embedder", "vlm2vec")
        parts = list(srv.parts)
        srv.script = ["500"] * 20
        monkeypatch.setenv("DDAI_HOME", str(tmp_path / "fresh"))  # no cached vectors
        failed = ddai("embed", w, "--out", tmp_path / "s2.safetensors", "--k", 2,
                      "--embedder", "vlm2vec", "--force", code=1)  # fmt: skip
    assert out["images_embedded"] == 9 and out["dim"] == 16
    # Each row went out as its image, then its question (a demonstration: question and answer).
    world = load_world(w)
    by_text = {r["question"]: r for r in world.queries}
    by_text |= {f"{d['question']} {d['answer']}": d for d in world.demos}
    assert len(parts) == 9
    for p in parts:
        (k1, sha), (k2, text) = p
        row = by_text[text]
        assert (k1, k2) == ("image", "text")
        assert sha == hashlib.sha256(Path(row["image"]).read_bytes()).hexdigest()
    assert "calls failed (http-500" in failed["output"]
    assert not (tmp_path / "s2.safetensors").exists()


def test_local_embedder_embeds_images_by_default(tmp_path):
    src = make_user_set(tmp_path / "src", 9, split=True)
    w, store = tmp_path / "w", tmp_path / "store.safetensors"
    ddai("world", w, "--from", src)
    out = ddai("embed", w, "--out", store, "--k", 2, "--embedder", "local")
    assert out["images_embedded"] == 9 and out["dim"] == 384 + 192
    # A text-only world keeps text-only vectors.
    ddai("world", tmp_path / "syn", "--queries", 6, "--demos", 6)
    plain = ddai("embed", tmp_path / "syn", "--out", tmp_path / "s.safetensors", "--k", 2,
                 "--embedder", "hash")  # fmt: skip
    assert plain["dim"] == 384 and "images embedded" not in plain


def test_local_embedder_load_bar_follows_no_progress(tmp_path):
    # --no-progress (and --json) drew transformers' "Loading weights" bar of the packaged MiniLM
    # on stderr anyway; --progress keeps it
    import transformers

    transformers.utils.logging.enable_progress_bar()  # an earlier test may have turned it off
    ddai("world", tmp_path / "w", "--queries", 4, "--demos", 4)
    for n, flag in enumerate(("--no-progress", "--progress")):
        out = str(tmp_path / f"{n}.safetensors")
        args = ["pointer", "embed", str(tmp_path / "w"), "--out", out, "--embedder", "local", flag]
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        assert ("Loading weights" in res.stderr) == (flag == "--progress"), res.stderr


def test_embed_dry_run_counts_calls_and_max_cost_stops_them(tmp_path, monkeypatch):
    src = make_user_set(tmp_path / "src", 6, split=True)
    w = tmp_path / "w"
    ddai("world", w, "--from", src)
    with FakeModelServer() as srv:
        monkeypatch.chdir(tmp_path)
        backend_toml(
            tmp_path,
            "vlm2vec",
            srv.openai_base_url,
            model="fake-embed",
            max_retries=0,
            price_in_per_mtok=1000000,
        )
        plan = ddai("embed", w, "--out", tmp_path / "s.safetensors", "--k", 2,
                    "--embedder", "vlm2vec", "--dry-run")  # fmt: skip
        assert srv.requests == 0 and not (tmp_path / "s.safetensors").exists()
        # 6 rows, each one image (258 tokens) and its text: a dollar per token.
        assert plan["items"] == plan["to_call"] == 6 and plan["est_cost_usd"] >= 6 * 258
        capped = ddai("embed", w, "--out", tmp_path / "s.safetensors", "--k", 2,
                      "--embedder", "vlm2vec", "--max-cost", 300, code=1)  # fmt: skip
    assert "max-cost" in capped["output"] and not (tmp_path / "s.safetensors").exists()
