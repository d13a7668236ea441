"""The round analyses on DDAI's real round-1 reward log (../shared/ddai-data/reconstructed/).

DDAI's round-2 analysis took round 1's prompts at or under 0.3 (436) and removed the 84 its
ground-truth review flagged: the attribution finds the same 436 low prompts and, given that
review, the same 84 as likely wrong ground truth.
"""

from __future__ import annotations

import pytest
from conftest import SHARED

from ddai.pipelines.analyses import AttributionConfig, attribute, drop_keep, reward_latency
from ddai.pipelines.ingest import IngestConfig, ingest


@pytest.fixture(scope="module")
def round1(tmp_path_factory):
    src = SHARED / "ddai-data" / "reconstructed" / "round1_flash_rm_detail.jsonl"
    if not src.is_file():
        pytest.fail(f"{src} is missing; tests expect ../shared/ddai-data beside the repo")
    logs = tmp_path_factory.mktemp("real") / "logs"
    ingest(IngestConfig([src], logs, progress=False))
    return logs, SHARED / "ddai-data" / "reconstructed" / "gt_review_round1.csv"


def test_attribution_finds_ddai_low_prompts_and_review(round1):
    logs, review = round1
    _, summary = attribute(logs, ["round1"], AttributionConfig(flags=[review]))
    r = summary["runs"]["round1"]
    assert (r["prompts"], r["low"]) == (854, 436)
    assert r["counts"]["wrong_gt"] == 84
    assert sum(r["counts"].values()) == 436


def test_latency_and_groups(round1):
    logs, _ = round1
    _, summary = reward_latency(logs, ["round1"])
    r = summary["runs"]["round1"]
    assert (r["rollouts"], r["rewarded"], r["with_latency"]) == (13_664, 13_664, 13_664)
    assert 0 < r["p50_latency_s"] <= r["p90_latency_s"] <= r["max_latency_s"]
    decisions, _, dk = drop_keep(logs, ["round1"])
    assert dk["runs"]["round1"]["prompts"] == 854 == decisions.height
