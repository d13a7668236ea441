"""The value-curve section on a store with hand-set turn values: per-action changes and flips,
per-turn curves by outcome, and the note for runs without values."""

from __future__ import annotations

import pytest
from support.turns import turn_row

from ddai.pipelines.store import query, write_run
from ddai.reports.blocks import Note
from ddai.reports.config import ReportConfig
from ddai.reports.context import ReportContext
from ddai.reports.sections import value_curves


def turn(idx, action, value, forced=False):
    arg = {"search": "q", "bbox": "[0, 0, 1, 1]", "search_complete": "true"}[action]
    return turn_row(idx, action, arg, forced=forced, value=value)


def rollout(idx, judge, turns):
    return {
        "uid": "u1",
        "rollout_idx": idx,
        "step": 1,
        "judge_score": judge,
        "format_ok": True,
        "turns": turns,
    }


@pytest.fixture
def ctx(tmp_path):
    logs = tmp_path / "logs"
    a = rollout(
        0, 1.0, [turn(0, "search", 0.4), turn(1, "bbox", 0.7), turn(2, "search_complete", 0.9)]
    )
    b = rollout(
        1,
        0.0,
        [
            turn(0, "search", 0.6),
            turn(1, "search", 0.3),
            turn(2, "search_complete", 0.2),
            turn(3, "search_complete", None, forced=True),
        ],
    )
    write_run(logs, "scored", [a, b])
    write_run(logs, "plain", [rollout(0, 1.0, [turn(0, "search_complete", None)])])
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False)
    con = query.connect(logs)
    yield ReportContext.open(cfg, con)
    con.close()


def test_changes_by_action_hand_computed(ctx):
    section = value_curves.build(ctx)
    s = section.stats
    assert s["turns_valued"] == 6 and s["runs_without_values"] == ["plain"]
    acts = s["by_action"]["scored"]
    # success a: search 0.4 -> 0.7 (+0.3), bbox 0.7 -> 0.9 (+0.2), complete 0.9 -> outcome 1 (+0.1)
    # failure b: search 0.6 -> 0.3 (-0.3), search 0.3 -> 0.2 (-0.1), complete 0.2 -> outcome 0 (-0.2)
    # (b's forced completion has no value and is skipped)
    assert acts["search"]["turns"] == 3
    assert acts["search"]["mean_before"] == pytest.approx((0.4 + 0.6 + 0.3) / 3)
    assert acts["search"]["mean_change"] == pytest.approx((0.3 - 0.3 - 0.1) / 3)
    assert (acts["search"]["flips_down"], acts["search"]["flips_up"]) == (
        1,
        1,
    )  # b0 0.6→0.3, a0 0.4→0.7
    assert acts["bbox"]["mean_change"] == pytest.approx(0.2)
    assert acts["search_complete"]["mean_change"] == pytest.approx((0.1 - 0.2) / 2)
    assert (acts["search_complete"]["flips_down"], acts["search_complete"]["flips_up"]) == (0, 0)


def test_curve_by_turn_and_outcome(ctx):
    by_turn = {
        (r["turn_idx"], r["outcome"]): r for r in value_curves.build(ctx).stats["by_turn"]["scored"]
    }
    assert by_turn[(0, "success")]["mean_value"] == pytest.approx(0.4)
    assert by_turn[(0, "failure")]["mean_value"] == pytest.approx(0.6)
    assert by_turn[(1, "failure")]["mean_change"] == pytest.approx(-0.1)
    assert (3, "failure") not in by_turn  # the forced completion


def test_no_values_gives_a_note_naming_the_command(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "plain", [rollout(0, 1.0, [turn(0, "search_complete", None)])])
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False)
    con = query.connect(logs)
    section = value_curves.build(ReportContext.open(cfg, con))
    assert section.stats["turns_valued"] == 0
    assert isinstance(section.blocks[0], Note) and "ddai value score" in section.blocks[0].text


def test_section_renders_in_the_report_page(ctx, tmp_path):
    from ddai.reports import build_report

    out = tmp_path / "value.html"
    cfg = ReportConfig(logs=ctx.cfg.logs, out=out, progress=False)
    summary = build_report(cfg, sections=(("value curves", value_curves.build),))
    html = out.read_text(encoding="utf-8")
    assert summary["sections"] == ["value"]
    assert (
        "fig-value-by-turn" in html and "fig-value-by-action" in html and "likely success" in html
    )
