"""``ddai eval``: a tiny local policy over DDAI's overall test set sample, logged as a run and
scored by the set's own categories, in the summary and in the report's evaluation section."""

from __future__ import annotations

import json
import re

import pytest
from cli_schemas import check
from support.toy_world import tiny_on_toy
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts
from ddai.trainer import toy

runner = CliRunner()


@pytest.mark.slow
def test_eval_on_the_overall_test_set_reports_its_categories(tmp_path, shared):
    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny", hidden_size=32)  # fmt: skip
    test_set = shared / "ddai-data" / "overall_test_crop.parquet"
    logs = tmp_path / "logs"
    args = ["eval", "--model", str(tiny), "--data", str(test_set), "--corpus",
            str(data / "pages.parquet"), "--logs", str(logs), "--run-id", "ev", "--limit", "2",
            "--max-turns", "2", "--max-turn-tokens", "20", "--max-completion-tokens", "200",
            "--obs-max-tokens", "12", "--json"]  # fmt: skip
    # the toy corpus lacks the test set's pages: collect's preflight refuses to evaluate blind
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "golden pages missing from the corpus" in res.output
    assert not logs.exists() or not read_rollouts(logs, ["ev"]).num_rows
    args.append("--skip-preflight")
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    check("eval", s)  # docs/schemas/eval.json
    # the set's own labels: data_source at the top level, content and reason type in extra_info
    assert s["categories"] == ["data_source", "content_type", "reason_type"]
    assert (s["prompts"], s["rollouts_logged"]) == (2, 2)
    assert {f: [v["value"] for v in vals] for f, vals in s["by_category"].items()} == {
        "data_source": ["slidevqa"],
        "content_type": ["Nan"],
        "reason_type": ["Nan"],
    }
    # the logged run carries each prompt's categories; the numbers are its rows' numbers
    rows = read_rollouts(logs, ["ev"]).to_pylist()
    assert sorted(r["uid"] for r in rows) == ["0", "1"]
    for r in rows:
        assert json.loads(r["extra"])["eval_categories"] == {
            "data_source": "slidevqa", "content_type": "Nan", "reason_type": "Nan"
        }  # fmt: skip
    ndcg = sum(r["ndcg"] or 0.0 for r in rows) / 2
    judged = [r["judge_score"] for r in rows if r["judge_score"] is not None]
    slide = s["by_category"]["data_source"][0]
    assert slide["ndcg"] == pytest.approx(ndcg) and s["ndcg"] == pytest.approx(ndcg)
    assert slide["judge_missing"] == 2 - len(judged) == s["judge_missing"]
    # a second eval into the same run is refused without --append
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--run-id ev" in again.output and "--append" in again.output
    # the report's evaluation section shows the same breakdown
    out = tmp_path / "r.html"
    rep = runner.invoke(app, ["report", "--logs", str(logs), "--out", str(out), "--no-progress",
                              "--browse-max", "0", "--json"])  # fmt: skip
    assert rep.exit_code == 0, rep.output
    html = out.read_text(encoding="utf-8")
    stats = json.loads(re.search(r'id="report-stats"[^>]*>(.*?)</script>', html, re.S).group(1))
    assert stats["evaluation"]["runs"]["ev"]["by_category"] == s["by_category"]
