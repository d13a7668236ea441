"""`ddai pointer`: the whole chain on a tiny world, and clear errors on bad input."""

from __future__ import annotations

import json

import polars as pl
import pytest
from cli_schemas import check
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pointer.world import read_jsonl
from ddai.pipelines.store import manifest

runner = CliRunner()


# tiny models train faster on one thread than fighting over two
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ddai(*args: str) -> dict:
    res = runner.invoke(app, ["pointer", *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    check(f"pointer-{args[0]}", data)  # docs/schemas/pointer-<sub-command>.json
    return data


def test_world_to_eval(tmp_path):
    w, store = tmp_path / "world", tmp_path / "store.safetensors"
    assert ddai("world", w, "--queries", 60, "--demos", 100, "--seed", 1)["queries"] == 60
    assert ddai("embed", w, "--out", store, "--k", 8)["k"] == 8
    sft = ddai(
        "train",
        "--store",
        store,
        "--out",
        tmp_path / "sft",
        "--mode",
        "sft",
        "--epochs",
        3,
        "--world",
        w,
    )
    assert sft["examples"] == 42 and sft["tensors_changed"] > 0
    gen = ddai(
        "gen", "--store", store, "--world", w, "--model", tmp_path / "sft", "--out", tmp_path / "raw.jsonl",
        "--num-beams", 3, "--temps", "1.0,1.3", "--n-per-temp", 1, "--num-random", 1,
    )  # fmt: skip
    assert gen["queries"] == 42 and gen["candidates/beam"] > 0 and gen["eval_failed"] == 0
    # The default --vqa local is the world's simulator, and the summary says so.
    assert gen["vqa"] == "simulated" and "simulator" in gen["vqa_note"]
    assert all(
        "vqa_correct" in c
        for r in read_jsonl(tmp_path / "raw.jsonl")
        for c in r["pointer_candidates"]
    )
    proc = ddai(
        "process", tmp_path / "raw.jsonl", "--out", tmp_path / "proc.parquet", "--correctness", "01"
    )
    assert proc["rows"] == gen["candidates"]
    assert set(pl.read_parquet(tmp_path / "proc.parquet")["reward"].unique().to_list()) <= {
        0.0,
        1.0,
    }
    stats = pl.read_parquet(tmp_path / "proc.stats.parquet")
    assert (
        set(stats["gen_method"]) <= {"beam", "sample", "random"} and "top2_share" in stats.columns
    )
    rl = ddai(
        "train", "--store", store, "--out", tmp_path / "rl", "--phases", "rce:1,clipped-group:2",
        "--data", tmp_path / "proc.parquet", "--init", tmp_path / "sft",
    )  # fmt: skip
    assert rl["phases"] == "rce:1,clipped-group:2" and rl["tensors_changed"] > 0
    ev = ddai(
        "eval", "--store", store, "--world", w, "--model", f"sft={tmp_path / 'sft'}",
        "--model", f"rl={tmp_path / 'rl'}", "--out", tmp_path / "eval",
    )  # fmt: skip
    assert ev["queries"] == 18
    for selector in ("sft", "sft:beam1", "rl", "similarity", "random"):
        assert 0.0 <= ev[f"{selector}/vqa_acc"] <= 1.0
    assert ev["sft/tv_vs_ref"] == 0.0
    assert ev["vqa"] == "simulated" and "not a model" in ev["vqa_note"]
    assert manifest.read(tmp_path / "eval" / "summary.parquet")["notes"]["vqa"] == "simulated"
    summary = pl.read_parquet(tmp_path / "eval" / "summary.parquet")
    assert summary.height == 5 and summary["vqa_acc"].is_between(0, 1).all()


def test_train_reads_the_old_grpo_mode_with_a_note(tmp_path):
    """``--phases grpo:1`` is read as ``clipped-group:1`` with one line on stderr (then the run
    refuses its missing --data, before any training)."""
    res = runner.invoke(
        app,
        ["pointer", "train", "--store", "s.safetensors", "--phases", "grpo:1",
         "--out-dir", str(tmp_path / "rl")],
    )  # fmt: skip
    assert res.exit_code == 2
    assert "'grpo' is now 'clipped-group'" in res.stderr
    assert "RL phases need --data" in " ".join(res.output.split())


def _train(*args: str) -> list[str]:
    """``pointer train`` with ``args`` (paths that need not exist: checks come first)."""
    return ["train", "--store", "s", "--out", "o", *args]


def _rl(*args: str) -> list[str]:
    """``pointer train`` of RL phases with ``args``."""
    return _train("--data", "d", "--init", "m", *args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["train", "--store", "s.safetensors", "--out", "o", "--phases", "rce:1,ppo:2"],
            "known: sft, rce",
        ),
        (
            [
                "train",
                "--store",
                "s.safetensors",
                "--out",
                "o",
                "--mode",
                "sft",
                "--phases",
                "rce:1",
            ],
            "exactly one",
        ),
        (["eval", "--store", "s.safetensors", "--world", "w", "--model", "sft"], "NAME=CHECKPOINT"),
        (["embed", "nowhere", "--out", "s.safetensors"], "ddai pointer world"),
        # before: accepted and ignored (the world's own embeddings cost no call to cap)
        (
            ["embed", "nowhere", "--out", "s.safetensors", "--max-cost", "1"],
            "--embedder world calls no embedder",
        ),
        (
            ["gen", "--store", "s", "--world", "w", "--model", "m", "--out", "o", "--temps", "hot"],
            "comma-separated",
        ),
        (["world", "w", "--topics", "12"], "n_topics"),
        # flags the run would not read (before: accepted, ignored and written to the manifest)
        (_train("--mode", "sft", "--world", "w", "--clip-eps", "0.1"), "RL settings"),
        (
            _train("--mode", "sft", "--world", "w", "--init", "m", "--d-model", "32"),
            "--d-model and --scoring shape a new model",
        ),
        (_rl("--mode", "rce", "--split", "test"), "--split picks the sft queries"),
        # RL settings no chosen phase reads (before: accepted, ignored, written to the manifest)
        (
            _rl("--mode", "rce", "--clip-eps", "0.1"),
            "phases rce do not read --clip-eps (read by clipped-group, reinforcepp with "
            "--reinforcepp-clip)",
        ),
        (
            _rl("--phases", "rce:1,clipped-group:2", "--no-reinforcepp-clip"),
            "phases rce,clipped-group do not read --no-reinforcepp-clip (read by reinforcepp)",
        ),
        (
            _rl("--mode", "clipped-group", "--rce-t-start", "3", "--rce-t-end", "0.1"),
            "do not read --rce-t-start (read by rce), --rce-t-end (read by rce)",
        ),
        (
            _rl("--mode", "reinforcepp", "--no-reinforcepp-clip", "--kl-coef", "0.1"),
            "phases reinforcepp do not read --kl-coef",
        ),
        (
            _rl("--mode", "rce", "--old-logp", "stored", "--adv-clip", "2"),
            "do not read --adv-clip (read by clipped-group, reinforcepp), --old-logp",
        ),
    ],
)
def test_bad_input_exits_2_and_names_the_fix(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["pointer", *args])
    assert res.exit_code == 2
    assert message in res.output


def _failed_record() -> dict:
    cand = {"pointer": [0, 1], "gen_method": "beam", "vqa_correct": None, "eval_failed": True}
    return {
        "query_id": "q0",
        "meta": {"split": "train"},
        "candidate_pool": {"candidate_ids": ["d0", "d1"], "size": 2},
        "pointer_candidates": [{**cand, "eval_error": "http-429"}],
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "no raw records in it"),
        (json.dumps(_failed_record()) + "\n", "eval_failed: http-429 (1)"),
    ],
)
def test_process_of_records_with_no_usable_pointer_exits_2_and_writes_nothing(
    tmp_path, raw, message
):
    # Before: an empty processed table and its statistics, exit 0.
    (tmp_path / "raw.jsonl").write_text(raw)
    out = tmp_path / "p.parquet"
    res = runner.invoke(app, ["pointer", "process", str(tmp_path / "raw.jsonl"), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.jsonl"]


def test_rl_training_on_empty_processed_data_names_the_file(tmp_path, sft_store):
    # Before: exit 2 with "torch.cat(): expected a non-empty list of Tensors".
    store, _ = sft_store
    data = tmp_path / "empty.parquet"
    pl.DataFrame(schema={"query_id": pl.String, "reward": pl.Float64}).write_parquet(data)
    res = runner.invoke(
        app,
        ["pointer", "train", "--store", str(store), "--data", str(data), "--init",
         str(tmp_path / "sft"), "--phases", "rce:1", "--out", str(tmp_path / "rl")],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert f"--data {data}: no processed pointer rows" in said and "ddai pointer process" in said
    assert not (tmp_path / "rl").exists()


def _processed(path, query_ids: list[str], rewards: dict[str, list[float]]) -> None:
    """Processed pointer rows: per query one row per reward, pointers (0, 1), (0, 2), …"""
    rows = [
        {"query_id": q, "pointer": [0, i + 1], "reward": r, "logprob_score": -1.0}
        for q in query_ids
        for i, r in enumerate(rewards.get(q, [1.0]))
    ]
    pl.DataFrame(rows).write_parquet(path)


@pytest.fixture
def sft_store(tmp_path):
    w, store = tmp_path / "world", tmp_path / "store.safetensors"
    ddai("world", w, "--queries", 12, "--demos", 20, "--seed", 1)
    ddai("embed", w, "--out", store, "--k", 4)
    ddai("train", "--store", store, "--out", tmp_path / "sft", "--mode", "sft", "--epochs", 1,
         "--world", w)  # fmt: skip
    from ddai.pipelines.pointer.store import load_store

    return store, load_store(store).query_ids


@pytest.mark.parametrize("phases", ["rce:1", "clipped-group:1", "reinforcepp:1"])
def test_rl_training_without_reward_variance_exits_2(tmp_path, sft_store, phases):
    # Before: exit 0 after training on all-zero advantages (RCE: copying the sampled pointers).
    store, qids = sft_store
    data = tmp_path / "flat.parquet"
    # 3 queries with one candidate, 2 with three candidates of one reward
    _processed(data, qids[:5], {q: [0.5, 0.5, 0.5] for q in qids[3:5]})
    res = runner.invoke(
        app,
        ["pointer", "train", "--store", str(store), "--data", str(data), "--init",
         str(tmp_path / "sft"), "--phases", phases, "--out", str(tmp_path / "rl")],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert f"--data {data}: none of its 5 queries can teach" in said
    assert "3 have one candidate pointer pair and 2 the same reward" in said
    assert not (tmp_path / "rl").exists()


def test_rl_training_with_some_flat_queries_warns_and_records_the_share(tmp_path, sft_store):
    store, qids = sft_store
    data = tmp_path / "some.parquet"
    # 4 queries: one with reward variance, three flat (one candidate each) → share 3/4
    _processed(data, qids[:4], {qids[0]: [1.0, -1.0]})
    s = ddai("train", "--store", store, "--data", data, "--init", tmp_path / "sft",
             "--phases", "clipped-group:2", "--out", tmp_path / "rl")  # fmt: skip
    assert s["queries"] == 4 and s["queries_without_reward_variance"] == 3
    assert "3 of 4 queries (75%) carry no learning signal" in s["warning"]
    assert s["rl/flat_group_share"] == 0.75
    history = [json.loads(x) for x in (tmp_path / "rl" / "history.jsonl").read_text().splitlines()]
    assert [h["rl/flat_group_share"] for h in history] == [0.75, 0.75]
    # the phase's metrics go by its name (they went under grpo/, train grpo's algorithm's)
    assert all(h["mode"] == "clipped-group" and "clipped_group/clip_frac" in h for h in history)
    assert not [k for h in history for k in h if k.startswith("grpo/")]
    notes = json.loads((tmp_path / "rl" / "model.safetensors.manifest.json").read_text())["notes"]
    assert notes["flat_groups"] == {"groups": 4, "flat": 3, "one_candidate": 3, "same_reward": 0}
