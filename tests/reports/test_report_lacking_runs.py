"""Report sections name every selected run a chart leaves out, with what it lacks and the fix.

Before, a run without judge scores (or with one rollout per prompt, or without steps) was simply
missing from the success histogram, the judge-vs-NDCG grid, the hallucination chart, the
zero-variance strip and the per-step latency charts, with no word in the page.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pytest

from ddai.pipelines import store
from ddai.reports import ReportConfig, build_report

FIXTURES = Path(__file__).parents[2] / "fixtures"


def _rows() -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / "logs" / "focused_r1.jsonl").open()]


def _section(page: str, sid: str) -> str:
    """The section's text, tags removed and whitespace collapsed."""
    sec = re.search(rf'<section id="{sid}">(.*?)</section>', page, re.S).group(1)
    sec = re.sub(r"<script.*?</script>", "", sec, flags=re.S)
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", sec)).split())


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("lacking")
    logs = root / "logs"
    store.write_run(logs, "full", _rows())
    store.write_run(logs, "nojudge", [{**r, "judge_score": None} for r in _rows()])
    # one rollout per prompt, no step: a flash-like eval run
    single = [{**r, "step": None} for r in _rows() if r["rollout_idx"] == 0]
    store.write_run(logs, "single", single)
    build_report(ReportConfig(logs=logs, out=root / "r.html", progress=False))
    return (root / "r.html").read_text(encoding="utf-8")


def test_runs_without_judge_scores_are_named_where_they_are_left_out(page):
    for sid, what in (
        ("outcomes", "success rates"),
        ("judge-ndcg", "judge vs NDCG"),
        ("hallucination", "hallucination suspects"),
    ):
        text = _section(page, sid)
        assert f"Run nojudge carries no judge score, so {what}" in text, sid
        assert "score the run with a judge" in text
        assert "Run full" not in text and "Runs full" not in text


def test_a_run_without_groups_is_named_under_the_zero_variance_chart(page):
    text = _section(page, "outcomes")
    assert "Run single has no GRPO group of two or more scored rollouts" in text
    assert "n_agent per prompt" in text


def test_a_run_without_steps_is_named_under_the_per_step_latency_charts(page):
    text = _section(page, "latency")
    assert "Run single carries no training step, so its latency" in text


def test_no_judge_at_all_does_not_claim_judge_and_ndcg_agree(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "nojudge", [{**r, "judge_score": None} for r in _rows()])
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    text = _section((tmp_path / "r.html").read_text(encoding="utf-8"), "judge-ndcg")
    assert "agree on all of them" not in text
    assert "no discrepancy class to chart" in text
    hall = _section((tmp_path / "r.html").read_text(encoding="utf-8"), "hallucination")
    assert "No rollout of these runs has a judge score" in hall
    assert "every answer judged correct retrieved a golden page" not in hall


def test_comparing_with_a_run_without_judge_says_why_no_prompt_moved(tmp_path):
    # Before: "Of the 18 prompts both runs played, 0 got better, 0 got worse and 0 stayed the
    # same" and two empty tables, no word why.
    logs = tmp_path / "logs"
    store.write_run(logs, "full", _rows())
    store.write_run(logs, "nojudge", [{**r, "judge_score": None} for r in _rows()])
    out = tmp_path / "r.html"
    build_report(ReportConfig(logs=logs, out=out, compare=("full", "nojudge"), progress=False))
    text = _section(out.read_text(encoding="utf-8"), "compare")
    assert "0 stayed the same (18 have no success rate in one of the runs)" in text
    assert "Run nojudge carries no judge score, so per-prompt success changes" in text
