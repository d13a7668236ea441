"""The report's round-analysis sections: failure attribution, reward latency, drop/keep lists.

Counts come from the hand-planted store in tests/pipelines/analyses/analysis_world.py; the CSV
downloads are decoded from their data URLs (a part from its whole list, as the page cuts it) and
read back.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

import pytest
from support.page_data import downloads

from ddai.pipelines import store
from ddai.reports import ReportConfig, build_report

sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines" / "analyses"))
from analysis_world import planted_store

SECTIONS = ("attribution", "latency", "drop-keep")


def _section(html: str, sid: str) -> str:
    return re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S).group(1)


def _downloads(section_html: str) -> dict[str, list[dict]]:
    return {
        name: list(csv.DictReader(io.StringIO(text)))
        for name, text in downloads(section_html).items()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyses-report")
    logs, flags = planted_store(root)
    out = root / "r.html"
    summary = build_report(ReportConfig(logs=logs, out=out, flags=[flags], progress=False))
    return summary, out.read_text()


def test_sections_and_counts(built):
    summary, _ = built
    assert set(SECTIONS) <= set(summary["sections"])
    s = summary["stats"]
    assert s["attribution"]["runs"]["r"]["counts"] == {
        "wrong_gt": 2,
        "generator_bottleneck": 2,
        "search_failure": 2,
    }
    assert s["latency"]["runs"]["r"]["timeouts"] == 1
    assert s["latency"]["runs"]["r"]["rewarded"] == 29
    assert s["drop-keep"]["runs"]["r"]["keep"] == 2
    assert s["drop-keep"]["zero_variance_groups"] == 6


def test_prompt_lists_download_as_csv(built):
    _, html = built
    att = _downloads(_section(html, "attribution"))
    whole = att["failure_attribution.csv"]
    assert sorted(r["uid"] for r in whole) == ["p1", "p2", "p3", "p4", "p5", "p7"]
    # by cause, then score: each cause's own list is its stretch of the whole, header included
    assert [r["class"] for r in whole] == sorted(r["class"] for r in whole)
    assert [r["uid"] for r in att["attribution_wrong_gt.csv"]] == ["p3", "p5"]
    for cls in ("wrong_gt", "generator_bottleneck", "search_failure"):
        assert att[f"attribution_{cls}.csv"] == [r for r in whole if r["class"] == cls]
    dk = _downloads(_section(html, "drop-keep"))
    assert sorted(r["uid"] for r in dk["prompts_keep.csv"]) == ["p6", "p7"]
    assert {r["uid"]: r["reason"] for r in dk["prompts_drop.csv"]}["p8"] == "always_full"
    assert len(dk["zero_variance_groups.csv"]) == 6


def test_charts_only_with_data(built):
    _, html = built
    assert 'id="fig-attribution-classes"' in _section(html, "attribution")
    lat = _section(html, "latency")
    assert 'id="fig-latency-p90"' in lat and 'id="fig-latency-coverage"' in lat


def test_a_run_without_the_inputs_gets_one_sentence_and_no_chart(tmp_path):
    logs = tmp_path / "logs"
    # one rollout per prompt, no judge, no pages, no reward: nothing any analysis can use
    store.write_run(logs, "bare", [{"uid": f"u{i}", "rollout_idx": 0} for i in range(3)])
    out = tmp_path / "r.html"
    summary = build_report(ReportConfig(logs=logs, out=out, progress=False))
    html = out.read_text()
    for sid in SECTIONS:
        sec = _section(html, sid)
        assert 'class="figure"' not in sec and "<table" not in sec and "download=" not in sec
        reading = re.search(r'<p class="reading">(.*?)</p>', sec, re.S).group(1)
        assert reading.startswith("No ")
    assert "judge scores" in _section(html, "attribution")  # says what is missing
    assert summary["stats"]["attribution"]["runs"] == {}


def test_missing_flags_file_fails_before_writing(tmp_path):
    logs, _ = planted_store(tmp_path)
    out = tmp_path / "r.html"
    with pytest.raises(FileNotFoundError, match="--flags"):
        build_report(
            ReportConfig(logs=logs, out=out, flags=[tmp_path / "none.csv"], progress=False)
        )
    assert not out.exists()


def test_flags_of_other_prompts_are_named_in_the_attribution_reading(tmp_path):
    # Before: the review was loaded and silently matched nothing.
    logs, _ = planted_store(tmp_path)
    other = tmp_path / "other_review.csv"
    other.write_text("uid,verdict,reason\ntrain_901,wrong,x\n")
    out = tmp_path / "r.html"
    build_report(ReportConfig(logs=logs, out=out, flags=[other], progress=False))
    reading = re.search(
        r'<p class="reading">(.*?)</p>', _section(out.read_text(), "attribution"), re.S
    )
    text = " ".join(reading.group(1).split())
    assert f"--flags {other}: none of its 1 flagged uids (first: &#39;train_901&#39;)" in text
