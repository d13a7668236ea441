"""The judge-vs-NDCG reading counts what its heatmap draws: a store whose disagreements all sit
below the class thresholds (judge 0 with NDCG in (0.8, 1), as in DDAI's flash rounds, where no
two-page reference reaches NDCG 1) no longer reads "judge and NDCG agree on all of them".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import SHARED
from report_world import page_figures
from test_report_lacking_runs import _section

from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.reports import ReportConfig, build_report
from ddai.reports.sections import judge_ndcg

ONLY = (("judge vs NDCG", judge_ndcg.build),)


def _row(i: int, judge: float, ndcg: float) -> dict:
    return {"uid": f"u{i // 4}", "rollout_idx": i % 4, "judge_score": judge, "ndcg": ndcg}


def _build(logs: Path, out: Path) -> tuple[dict, str]:
    res = build_report(ReportConfig(logs=logs, out=out, progress=False), sections=ONLY)
    return res["stats"]["judge-ndcg"], _section(out.read_text(encoding="utf-8"), "judge-ndcg")


def _heat_cells(out: Path) -> dict[tuple[str, str], int]:
    """(judge row, NDCG column) → rollouts, summed over the runs, read from the heatmap's text."""
    cells: dict[tuple[str, str], int] = {}
    for t in page_figures(out.read_text(encoding="utf-8"))["fig-judge-ndcg-heatmap"]["data"]:
        for y, row in zip(t["y"], t["text"], strict=True):
            for x, text in zip(t["x"], row, strict=True):
                if text:
                    cells[y, x] = cells.get((y, x), 0) + int(text.replace(",", ""))
    return cells


def test_disagreement_below_the_class_thresholds_is_read_from_the_chart(tmp_path):
    # 16 rollouts: 5 judged 0 with NDCG 0.9 (disagree), 2 judged 1 with NDCG 0 (disagree,
    # but NDCG 0 = ndcg_low: these do fall in a class), 4 judged 0 with NDCG 0 and 3 judged 1
    # with NDCG 0.85 (agree), 2 judged 0.5 with NDCG 0.5 (between)
    spec = [(0.0, 0.9)] * 5 + [(1.0, 0.0)] * 2 + [(0.0, 0.0)] * 4 + [(1.0, 0.85)] * 3
    spec += [(0.5, 0.5)] * 2
    logs = tmp_path / "logs"
    store.write_run(logs, "r", [_row(i, j, n) for i, (j, n) in enumerate(spec)])
    stats, text = _build(logs, tmp_path / "r.html")
    assert stats["grid"]["corners"] == {"scored": 16, "agree": 7, "wrong_found": 5, "right_none": 2}
    cells = _heat_cells(tmp_path / "r.html")
    assert cells[("0", "(0.8, 1)")] == 5 and cells[("1", "0")] == 2
    assert "agree on all of them" not in text
    assert (
        "Of the heatmap's 16 rollouts with both scores, 7 sit in the corners where the two agree"
    ) in text
    assert "and 7 in the corners where they disagree: 5 judged wrong (judge ≤ 0)" in text
    assert "2 judged correct (≥ 0.5) with NDCG 0" in text and "the other 2 have" in text


def test_no_class_but_disagreeing_corners_says_so(tmp_path):
    logs = tmp_path / "logs"
    spec = [(0.0, 0.9)] * 3 + [(1.0, 0.9)] * 5
    store.write_run(logs, "r", [_row(i, j, n) for i, (j, n) in enumerate(spec)])
    stats, text = _build(logs, tmp_path / "r.html")
    assert all(
        v == 0 for k, v in stats["discrepancies"]["r"].items() if k not in ("run_id", "scored")
    )
    assert "agree on all of them" not in text
    assert (
        "None of the 8 rollouts with both scores falls in a discrepancy class at these "
        "thresholds (judge ≥ 0.5 with NDCG ≤ 0; judge ≤ 0 with NDCG ≥ 1), yet 3 sit in the "
        "heatmap's disagreeing corners (3 judged wrong with NDCG above 0.8, 0 judged correct "
        "with NDCG 0): --ndcg-high 0.8 puts the first into a class."
    ) in text


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    src = SHARED / "ddai-data" / "reconstructed"
    logs = tmp_path_factory.mktemp("flash") / "logs"
    ingest(IngestConfig(sorted(src.glob("round*_flash_rm_detail.jsonl")), logs, progress=False))
    return logs


def test_ddai_flash_rounds_read_their_1881_disagreements(flash, tmp_path):
    stats, text = _build(flash, tmp_path / "r.html")
    cells = _heat_cells(tmp_path / "r.html")
    wrong_found = cells.get(("0", "(0.8, 1)"), 0) + cells.get(("0", "1"), 0)
    assert wrong_found == 1881 == stats["grid"]["corners"]["wrong_found"]
    assert "agree on all of them" not in text
    assert re.search(r"1,881 judged wrong \(judge ≤ 0\) although NDCG is above 0\.8", text)
    assert "1,881 judged wrong with NDCG above 0.8" in text
