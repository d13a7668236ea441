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
    store.write_run(logs, "nondcg", [{**r, "ndcg": None} for r in _rows()])
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


def test_a_run_without_ndcg_gets_a_fix_the_report_reader_can_use(page):
    # Before: "... or pass a per-prompt score table with --scores", a flag of `curate bucket`
    # that no report (and no run) takes.
    text = _section(page, "judge-ndcg")
    assert "Run nondcg carries no NDCG, so judge vs NDCG" in text
    assert "an `ndcg` column)." in text and "--scores" not in text


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


def test_the_overview_says_how_many_rollouts_ended_unknown_and_that_none_has_turns(tmp_path):
    """A flash log (no turns, no termination) read 'with — turns per rollout. Of all rollouts, 0
    stopped on their own, 0 hit the turn limit, 0 ... and 0 in an error' over 100% unknowns."""
    logs = tmp_path / "logs"
    keep = ("run_id", "uid", "rollout_idx", "sample_idx", "judge_score", "ndcg", "reward")
    flash = [{k: r.get(k) for k in keep} for r in _rows()]  # what a flash reward line carries
    store.write_run(logs, "flash", flash)
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    text = _section((tmp_path / "r.html").read_text(encoding="utf-8"), "overview")
    assert "and no rollout carries parsed turns." in text and "— turns per rollout" not in text
    n = f"{len(flash):,}"
    assert f"in an error; how the other {n} ended is unknown (their logs do not record it)." in text


def test_the_overview_of_runs_with_turns_has_no_unknown_clause(page):
    text = _section(page, "overview")
    assert "turns per rollout. Of all rollouts," in text
    assert "ended is unknown" not in text


def test_judge_vs_ndcg_without_a_rollout_with_both_scores_says_so_not_a_row_of_zeros(tmp_path):
    # judge scores but no NDCG anywhere: nothing to count, so the reading does not recite zeros
    # and no header-only table stands in for the counts
    logs = tmp_path / "logs"
    store.write_run(logs, "nondcg", [{**r, "ndcg": None} for r in _rows()])
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    text = _section(page, "judge-ndcg")
    assert "heatmap's 0 rollouts" not in text and "the other 0" not in text
    assert "None of these runs' rollouts has both a judge score and NDCG" in text
    sec = re.search(r'<section id="judge-ndcg">(.*?)</section>', page, re.S).group(1)
    assert "<table" not in sec


def _unscored_page(tmp_path, **blank) -> str:
    logs = tmp_path / "logs"
    store.write_run(logs, "blank", [{**r, **blank} for r in _rows()])
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    return (tmp_path / "r.html").read_text(encoding="utf-8")


def _section_html(page: str, sid: str) -> str:
    return re.search(rf'<section id="{sid}">(.*?)</section>', page, re.S).group(1)


def test_outcomes_with_no_score_say_so_once_not_a_sentence_of_zeros(tmp_path):
    # Before: "of 0 prompt-runs, 0 scored exactly 0 and 0 exactly 1" and the zero-variance
    # table's header with no row, under the notes that say no run carries a score
    page = _unscored_page(tmp_path, judge_score=None, reward=None)
    text = _section(page, "outcomes")
    assert "of 0 prompt-runs" not in text and "0 scored exactly 0" not in text
    assert "No prompt of these runs has a score (reward or judge), so none is banded." in text
    assert "<table" not in _section_html(page, "outcomes")


def test_hallucination_with_no_judge_says_so_once_not_zeros(tmp_path):
    # Before: "0 of 0 correct rollouts with reference pages are suspects (—); 0 of them ..." and a
    # table row of zeros for the run the note says carries no judge score
    page = _unscored_page(tmp_path, judge_score=None)
    text = _section(page, "hallucination")
    assert "0 of 0 correct" not in text and "0 of them" not in text
    assert "No rollout of these runs has a judge score, so none is counted here." in text
    assert "<table" not in _section_html(page, "hallucination")


def test_hallucination_table_leaves_out_the_runs_without_judge(page):
    # the run the note names as lacking judge scores had a row "nojudge 0 0 0 0 — —"
    sec = _section_html(page, "hallucination")
    first = re.search(r"<table.*?</table>", sec, re.S).group(0)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first, re.S)
    assert "nojudge" not in cells and "full" in cells


@pytest.mark.parametrize(
    ("blank", "said"),
    [
        ({"judge_score": None}, "No rollout is judged (no success rate or mean judge score); the "
         "mean NDCG is 0.377, with 4.1 turns per rollout."),
        ({"judge_score": None, "ndcg": None}, "No rollout is judged (no success rate or mean "
         "judge score) and none carries NDCG, with 4.1 turns per rollout."),
        ({"ndcg": None}, "20.1% of the 144 judged rollouts succeeded; the mean judge score is "
         "0.257 and no rollout carries NDCG, with 4.1 turns per rollout."),
    ],
)  # fmt: skip
def test_the_overview_says_what_is_not_scored_instead_of_dashes_over_zero(tmp_path, blank, said):
    # Before: "— of the 0 judged rollouts succeeded; the mean judge score is — and the mean NDCG —"
    text = _section(_unscored_page(tmp_path, **blank), "overview")
    assert "of the 0 judged" not in text and "is —" not in text and "NDCG —" not in text
    assert said in text


def test_latency_names_a_run_with_neither_reward_nor_judge(tmp_path):
    # Before: the run was left out without a word, and the reading's coverage ("144 of 144
    # rollouts got a reward") read as if every selected run had been counted
    logs = tmp_path / "logs"
    store.write_run(logs, "full", _rows())
    store.write_run(logs, "noscore", [{**r, "judge_score": None, "reward": None} for r in _rows()])
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    text = _section((tmp_path / "r.html").read_text(encoding="utf-8"), "latency")
    assert "144 of 144 rollouts got a reward" in text  # full's, as before
    assert (
        "Run noscore has no reward and no judge score, so reward latency and coverage cannot be "
        "shown for it. To fill it: ingest a log with the reward manager's scores" in text
    )


def test_drop_keep_names_the_runs_it_leaves_out(page):
    # Before: run single (one rollout per prompt: no group) was missing from the table and the
    # counts without a word
    text = _section(page, "drop-keep")
    assert "Run single has no GRPO group of two or more scored rollouts" in text
    assert "so drop/keep decisions cannot be shown for it" in text


def _hallucination(tmp_path, runs: dict[str, list[dict]]) -> tuple[str, str]:
    logs = tmp_path / "logs"
    for run, rows in runs.items():
        store.write_run(logs, run, rows)
    build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    return _section(page, "hallucination"), _section_html(page, "hallucination")


def test_a_judged_run_without_reference_pages_is_not_counted_as_zero_suspects(tmp_path):
    # Before: run noref's row read "noref 144 0 0 0 0.0% —", the same as a judged run that truly
    # has no suspect, and no note said its rollouts carry no reference pages
    text, sec = _hallucination(
        tmp_path, {"full": _rows(), "noref": [{**r, "reference_pages": None} for r in _rows()]}
    )
    first = re.search(r"<table.*?</table>", sec, re.S).group(0)
    rows = {
        cells[0]: cells
        for cells in (
            [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
            for tr in re.findall(r"<tr>(.*?)</tr>", first, re.S)
        )
        if cells
    }  # fmt: skip
    assert rows["full"] == ["full", "144", "38", "5", "5", "3.5%", "13.2%"]
    assert rows["noref"][:2] == ["noref", "144"]
    assert set(rows["noref"][2:]) == {"not counted: no reference pages"}
    assert "Run noref has no judged rollout with reference pages (no retrieved page can be" in text
    assert "To fill it: ingest a log that names each prompt's reference pages" in text
    assert "5 of 38 correct rollouts with reference pages are suspects (13.2%)" in text


def test_hallucination_with_no_reference_pages_at_all_says_so_not_zeros(tmp_path):
    # Before: "0 of 0 correct rollouts with reference pages are suspects (—)", a chart note that
    # every correct answer retrieved a golden page, and a row of zeros
    text, _ = _hallucination(tmp_path, {"noref": [{**r, "reference_pages": None} for r in _rows()]})
    assert "0 of 0 correct" not in text and "0 of them" not in text
    assert "every answer judged correct retrieved a golden page" not in text
    assert "No judged rollout of these runs has reference pages, so no suspect is counted" in text
    assert "not counted: no reference pages" in text
