"""The funnel on the synthetic world, end to end (what ``ddai demo`` runs).

bucket (phase 1) → verify-gt on bucket 0 (the local verifier proposes over the world's page
text; the world's review decides) → focus round 1 (curriculum run) → focus round 2 (focused
round 1 and its review) → plan for the next round → lineage.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel import bucket, focus, lineage, plan, verify_gt

RUNS = {"bucket": "phase1", "round1": "curriculum", "round2": "focused_r1"}


def run_funnel_demo(
    world_dir: str | os.PathLike[str], logs: str | os.PathLike[str], out_dir: str | os.PathLike[str]
) -> dict[str, Any]:
    """Run every funnel step on a synthetic world whose runs are ingested into ``logs``.

    Outputs go to ``out_dir`` (DDAI's file names); returns a short summary, with whether the
    counts and order match the world's ``truth.json`` when it has one.
    """
    world, logs, out = Path(world_dir), Path(logs), Path(out_dir)
    b = bucket.run_bucket(
        bucket.BucketConfig(
            dataset=world / "dataset.parquet", out=out, logs=logs, runs=(RUNS["bucket"],)
        )
    )
    v = verify_gt.run_verify(
        verify_gt.VerifyConfig(
            dataset=b.outputs["0"],
            out=out,
            verifier="local",
            corpus=world / "pages.parquet",
            decisions=(world / "reviews" / "gt_review_bucket0.csv",),
        )
    )
    r1 = focus.run_focus(
        focus.FocusConfig(
            out=out / "focused_round1.parquet",
            logs=logs,
            runs=(RUNS["round1"],),
            bucket_a=b.outputs["a"],
            bucket_0=v.outputs["filtered"],
        )
    )
    r2 = focus.run_focus(
        focus.FocusConfig(
            out=out / "focused_round2.parquet",
            logs=logs,
            runs=(RUNS["round2"],),
            prev=r1.outputs["focus"],
            decisions=(world / "reviews" / "gt_review_round1.csv",),
        )
    )
    graph = lineage.lineage_graph([r2.outputs["focus"]])
    p = plan.run_plan(
        plan.PlanConfig(logs=logs, runs=(RUNS["round2"],), buckets=(r2.outputs["focus"],))
    )
    counts = {
        "bucket_B": b.summary["bucket B"],
        "bucket_A": b.summary["bucket A"],
        "bucket_0": b.summary["bucket 0"],
        "bucket0_verified": v.summary["kept"],
        "hard_a": r1.summary["hard A"],
        "round1": r1.summary["round 1"],
        "round1_low": r2.summary["at or under score max"],
        "round2": r2.summary["next round"],
    }
    out_summary: dict[str, Any] = {
        "bucket B": counts["bucket_B"],
        "bucket A": counts["bucket_A"],
        "bucket 0": counts["bucket_0"],
        "bucket 0 verified": counts["bucket0_verified"],
        "GT proposals": v.summary["proposals"],
        "round 1": counts["round1"],
        "round 1 hard A": counts["hard_a"],
        "round 2": counts["round2"],
        "lineage steps": sum(n["kind"] == "step" for n in graph["nodes"]),
        "n_agent for round 2": p.recommend.get(Path(r2.outputs["focus"]).stem),
        "funnel": str(out),
    }
    truth_path = world / "truth.json"
    if truth_path.is_file():
        out_summary["matches truth.json"] = _matches_truth(truth_path, counts, r2.outputs["focus"])
    return out_summary


def _matches_truth(truth_path: Path, counts: dict[str, int], round2: Path) -> bool:
    from ddai.pipelines.funnel import dataset as ds

    truth = json.loads(truth_path.read_text(encoding="utf-8"))["funnel"]
    want = {k: truth["counts"].get(k) for k in counts}
    return want == counts and ds.ids(ds.read_dataset(round2)) == truth["round2"]
