"""The funnel on the synthetic world: its truth table reproduced, lineage, and plan vs simulation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.funnel_data import ids_of

from ddai.pipelines import fixtures
from ddai.pipelines.fixtures.runs import RUNS, iter_steps
from ddai.pipelines.funnel import lineage, plan, run_funnel_demo
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import io


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    fixtures.make_world(root / "world", seed=0, size="small")
    logs = root / "logs"
    ingest(IngestConfig(sorted((root / "world" / "logs").glob("*.jsonl")), logs, progress=False))
    return root / "world", logs


def test_demo_reproduces_the_truth_table(world, tmp_path):
    world_dir, logs = world
    out = tmp_path / "funnel"
    summary = run_funnel_demo(world_dir, logs, out)
    assert summary["matches truth.json"] is True
    truth = json.loads((world_dir / "truth.json").read_text())["funnel"]
    assert ids_of(out / "curriculum_bucket_b.parquet") == truth["buckets"]["B"]
    assert ids_of(out / "curriculum_bucket_a.parquet") == truth["buckets"]["A"]
    assert ids_of(out / "curriculum_bucket_0.parquet") == truth["buckets"]["0"]
    assert ids_of(out / "focused_round1.parquet") == truth["round1"]
    assert ids_of(out / "focused_round2.parquet") == truth["round2"]

    # A second run changes nothing and rewrites nothing.
    stamps = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    assert run_funnel_demo(world_dir, logs, out) == summary
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == stamps


def test_lineage_walks_round2_back_to_the_raw_logs(world, tmp_path):
    world_dir, logs = world
    out = tmp_path / "funnel"
    run_funnel_demo(world_dir, logs, out)
    graph = lineage.lineage_graph([out / "focused_round2.parquet"], check_hashes=True)
    by_name = {n["name"]: n for n in graph["nodes"]}
    truth = json.loads((world_dir / "truth.json").read_text())["funnel"]["counts"]

    assert by_name["dataset.parquet"]["kind"] == "file"
    assert by_name["dataset.parquet"]["rows"] == truth["prompts"]
    assert by_name["run_id=phase1"]["kind"] == "log"
    assert by_name["phase1.jsonl"]["kind"] == "source"
    assert by_name["focused_round2.parquet"]["rows"] == truth["round2"]
    assert by_name["curriculum_bucket_0_filtered.parquet"]["rows"] == truth["bucket0_verified"]
    # Topological: every edge goes from an earlier node to a later one.
    order = {n["id"]: i for i, n in enumerate(graph["nodes"])}
    assert all(order[e["source"]] < order[e["target"]] for e in graph["edges"])
    # Edge counts: what each input contributed to round 1.
    r1 = str((out / "focused_round1.parquet").resolve())
    into_r1 = {Path(e["source"]).name: e["rows"] for e in graph["edges"] if e["target"] == r1}
    assert into_r1 == {
        "curriculum_bucket_a.parquet": truth["hard_a"],
        "curriculum_bucket_0_filtered.parquet": truth["bucket0_verified"],
        "run_id=curriculum": None,
    }
    assert not any(e["changed"] for e in graph["edges"] if e["changed"] is not None)
    steps = [r["step"] for r in lineage.lineage_rows(graph)]
    assert steps[-1] == "curate.focus.next" and "ingest (phase1)" in steps

    # Editing a review after the fact shows up as a changed input.
    review = world_dir / "reviews" / "gt_review_round1.csv"
    original = review.read_bytes()
    try:
        io.write_text(review, original.decode() + "train_0,ok,late\n")
        again = lineage.lineage_graph([out / "focused_round2.parquet"], check_hashes=True)
        changed = [Path(e["source"]).name for e in again["edges"] if e["changed"]]
        assert changed == ["gt_review_round1.csv"]
    finally:
        review.write_bytes(original)


@pytest.mark.slow
def test_plan_estimate_matches_simulating_the_world(tmp_path):
    # Log: the world's focused-round-1 policy, 8 rollouts on each of 150 prompts. Simulation: three
    # fresh epochs of 16 rollouts per prompt from the same simulated policy (450 groups; epoch 0
    # would replay the logged draws). Standard error of the simulated share ≈ 0.013, of the
    # estimate from 150 prompts ≈ 0.02: tolerance 0.05 (the plug-in estimate misses by > 0.08).
    world = fixtures.build_world(0, 150)
    rows = fixtures.iter_rollouts(0, 150, run="focused_r1", n_agent=8, world=world)
    src = tmp_path / "r1.jsonl"
    src.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows), encoding="utf-8")
    ingest(IngestConfig([src], tmp_path / "logs", run_id="r1", progress=False))

    fresh: dict[tuple[str, int], int] = {}
    for batch in iter_steps(world, RUNS["focused_r1"], world.prompts, epochs=4, n_agent=16):
        if batch.epoch == 0:
            continue
        for r in batch.rollouts:
            key = (r.prompt.uid, batch.epoch)
            fresh[key] = fresh.get(key, 0) + int(r.success)
    k = np.array(list(fresh.values()))
    simulated = float(np.mean((k > 0) & (k < 16)))

    def share(prior: str) -> float:
        cfg = plan.PlanConfig(logs=tmp_path / "logs", runs=("r1",), n_agent=(16,), prior=prior)
        rows = plan.run_plan(cfg).rows
        return next(r["mixed_share"] for r in rows if r["bucket"] == "all")

    assert share("empirical") == pytest.approx(simulated, abs=0.05)
    assert simulated - share("none") > 0.08
