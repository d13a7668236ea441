"""The post-pass and conversions on DDAI's published distillation output (../shared/ddai-data).

``after_focus_half_or_less_sft.v2.rewritten.safe.parquet``: 256 rows; its README states 112 rows
end in the forced max-turn completion and 3 rows hold two merged trajectories.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from ddai.pipelines.backends import get_backend
from ddai.pipelines.distill import findings as fnd
from ddai.pipelines.distill import formats, rewrite
from ddai.pipelines.distill.check import CheckConfig, check_candidates, convert, run_check
from ddai.pipelines.distill.safety import post_pass

SAFE = "after_focus_half_or_less_sft.v2.rewritten.safe.parquet"
MERGED = {"train_3733__s101__2c451b12", "train_2819__s63__2c451b12", "train_3733__s106__2c451b12"}


@pytest.fixture
def safe(shared):
    return shared / "ddai-data" / SAFE


def test_identity_rewrite_and_post_pass_change_no_byte(safe, tmp_path):
    samples, fmt = formats.read(safe)
    assert fmt == "train1" and len(samples) == 256
    cands = check_candidates(samples)
    identity = get_backend("rewriter", "identity", cache=False, progress=False)
    applied = rewrite.run(identity, cands, rewrite.Chunking())
    # every row has a non-forced think, and the identity gives each back as it was
    assert (applied.rewritten, applied.unchanged) == (0, 256)
    res = post_pass(cands)
    assert res.dropped == {} and res.rollbacks == {} and res.discards == {}
    formats.write(tmp_path / "out.parquet", res.samples, "train1")
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(safe))


def test_check_finds_forced_completions_and_merged_rows(safe, tmp_path):
    out = tmp_path / "checked.parquet"
    summary = run_check(CheckConfig(safe, out=out, progress=False))
    assert summary["rows in"] == summary["rows kept"] == summary["rows unchanged"] == 256
    found = summary["findings (rows)"]
    assert found["rows ending in a forced completion"] == 112
    assert found["rows ending in the exact forced completion"] == 22
    assert found["rows ending in a paraphrased forced completion"] == 90
    assert found["rows with action-tag text in a think"] == 0
    assert summary["grammar faults (rows)"][fnd.MERGED_TRAJECTORIES] == 3
    assert summary["grammar faults (rows)"]["invalid-turn: two thinks"] == 2
    report = [
        json.loads(x) for x in (tmp_path / "checked.parquet.report.jsonl").read_text().splitlines()
    ]
    assert {r["uid"] for r in report if r["rule"] == fnd.MERGED_TRAJECTORIES} == MERGED
    assert all(r["action"] == "fault" for r in report)
    assert pq.read_table(out).equals(pq.read_table(safe))
    manifest = json.loads((tmp_path / "checked.parquet.manifest.json").read_text())
    assert manifest["rows"] == {"in": 256, "out": 256, "dropped": {}}


def test_drop_forced_on_real_data(safe, tmp_path):
    summary = run_check(
        CheckConfig(safe, out=tmp_path / "o.parquet", drop_forced=True, progress=False)
    )
    # 112 rows end in a forced completion; one merged row holds one mid-trajectory.
    assert summary["dropped"] == {"forced-completion": 113}
    assert summary["rows kept"] == 256 - 113


def test_converts_to_messages_and_back_byte_for_byte(safe, tmp_path):
    convert(safe, tmp_path / "m.parquet", "messages")
    convert(tmp_path / "m.parquet", tmp_path / "t.parquet", "train1")
    assert pq.read_table(tmp_path / "t.parquet").equals(pq.read_table(safe))
    msgs = pq.read_table(tmp_path / "m.parquet").to_pylist()[0]["messages"]
    assert msgs[3]["content"][0]["type"] == "image"


@pytest.mark.parametrize("name", ["val1.parquet", "sft_success_only_focused2.train1.parquet"])
def test_other_ddai_sft_files_round_trip(shared, tmp_path, name):
    src = shared / "ddai-data" / name
    convert(src, tmp_path / "m.parquet", "messages")
    convert(tmp_path / "m.parquet", tmp_path / "t.parquet", "train1")
    assert pq.read_table(tmp_path / "t.parquet").equals(pq.read_table(src))
