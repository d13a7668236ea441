"""DDAI's published funnel, reproduced from the real data in ../shared/ddai-data.

Bucket 2,791 / 1,560 / 637 with 1,679 unscored; bucket 0 582 after the review; round 1 272 + 582
= 854; round 2 352 (436 at or under 0.3, 84 flagged), in round 1's order.
"""

from __future__ import annotations

import pytest
from conftest import SHARED
from support import ddai_funnel
from support.funnel_data import ids_of

from ddai.pipelines.funnel import lineage
from ddai.pipelines.funnel.focus import FocusConfig, run_focus
from ddai.pipelines.funnel.verify_gt import VerifyConfig, run_verify
from ddai.pipelines.store import manifest


@pytest.fixture(scope="module")
def funnel(tmp_path_factory):
    rec = ddai_funnel.reconstructed(SHARED)
    root = tmp_path_factory.mktemp("real")
    logs, out = root / "logs", root / "out"
    ddai_funnel.ingest_rounds(SHARED, logs)
    b = ddai_funnel.bucket(SHARED, out)
    v = run_verify(
        VerifyConfig(dataset=b.outputs["0"], out=out, decisions=(rec / "gt_review_bucket0.csv",))
    )
    r1 = run_focus(
        FocusConfig(
            out=out / "focused_round1.parquet",
            logs=logs,
            runs=("round0",),
            bucket_a=b.outputs["a"],
            bucket_0=v.outputs["filtered"],
            hard_max=0.2,
        )
    )
    r2 = run_focus(
        FocusConfig(
            out=out / "focused_round2.parquet",
            logs=logs,
            runs=("round1",),
            prev=r1.outputs["focus"],
            score_max=0.3,
            decisions=(rec / "gt_review_round1.csv",),
        )
    )
    return b, v, r1, r2


def test_buckets(funnel):
    b, *_ = funnel
    assert (b.summary["bucket B"], b.summary["bucket A"], b.summary["bucket 0"]) == (
        2791,
        1560,
        637,
    )
    assert b.summary["no score"] == 1679
    assert len(manifest.read(b.outputs["b"])["notes"]["unscored_ids"]) == 1679


def test_bucket0_review(funnel):
    _, v, _, _ = funnel
    assert v.summary["kept"] == 582
    assert v.summary["excluded by verdict"] == {"wrong": 55}


def test_round1_is_hard_a_in_a_order_then_verified_bucket0(funnel):
    b, v, r1, _ = funnel
    assert (r1.summary["hard A"], r1.summary["bucket 0"], r1.summary["round 1"]) == (272, 582, 854)
    got = ids_of(r1.outputs["focus"])
    a_order = ids_of(b.outputs["a"])
    hard = got[:272]
    assert hard == [u for u in a_order if u in set(hard)]
    assert got[272:] == ids_of(v.outputs["filtered"])


def test_round2_in_round1_order(funnel):
    *_, r1, r2 = funnel
    assert r2.summary["at or under score max"] == 436
    assert r2.summary["flagged"] == 84
    got = ids_of(r2.outputs["focus"])
    assert len(got) == 352
    r1_ids = ids_of(r1.outputs["focus"])
    assert got == [u for u in r1_ids if u in set(got)]


def test_lineage_prints_the_chain_with_these_counts(funnel):
    *_, r2 = funnel
    graph = lineage.lineage_graph([r2.outputs["focus"]])
    rows = {r["output"]: r for r in lineage.lineage_rows(graph)}
    assert rows["slidevqa_train_6667.parquet"]["rows out"] == 6667
    assert rows["curriculum_bucket_a.parquet"]["rows out"] == 1560
    assert rows["curriculum_bucket_0.parquet"]["rows out"] == 637
    assert rows["curriculum_bucket_0_filtered.parquet"]["rows out"] == 582
    assert rows["focused_round1.parquet"]["rows out"] == 854
    assert rows["focused_round1.parquet"]["inputs"][0] == "curriculum_bucket_a.parquet (272)"
    assert rows["focused_round2.parquet"]["rows out"] == 352
    assert rows["focused_round2.parquet"]["dropped"] == {
        "above 0.3": 418,
        "flagged wrong": 65,
        "flagged uncertain": 19,
    }
    assert rows["run_id=round0"]["rows out"] == 12480
    assert rows["round0_flash_rm_detail.jsonl"]["step"] == "raw log"
