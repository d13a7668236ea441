"""The value section shows `ddai train value-sft`'s per-token TD weights (mean, clip shares) for
each `--value-sft DIR`, from its metrics.jsonl and run_config.json, with hand-computed numbers."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import query, write_run
from ddai.reports.blocks import Note, Table
from ddai.reports.config import ReportConfig
from ddai.reports.context import ReportContext
from ddai.reports.sections import value_curves

runner = CliRunner()


def value_sft_dir(root, weights, lows, highs, ces):
    """A value-sft output folder as the trainer writes it: an eval row at step 0 (value/* only),
    then one row per step with the joint/* metrics."""
    root.mkdir(parents=True)
    rows = [{"step": 0, "value/loss": 0.5}]
    for i, (w, lo, hi, ce) in enumerate(zip(weights, lows, highs, ces, strict=True), start=1):
        rows.append(
            {
                "step": i,
                "joint/weight_mean": w,
                "joint/clip_low": lo,
                "joint/clip_high": hi,
                "joint/weighted_ce": ce,
                "joint/loss": ce + 0.1,
                "value/loss": 0.4,
            }
        )
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"runs": ["cur"], "beta": 1.0, "weight_clip_min": 0.1, "weight_clip_max": 2.0}
    (root / "run_config.json").write_text(
        json.dumps({"command": "train value-sft", "config": config})
    )
    return root


@pytest.fixture
def logs(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "cur", [{"uid": "u1", "rollout_idx": 0, "judge_score": 1.0, "format_ok": True}])
    return logs


def section(logs, tmp_path, folders):
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False, value_sft=folders)
    return value_curves.build(ReportContext.open(cfg, query.connect(logs)))


def test_weights_mean_and_clip_shares_are_shown(logs, tmp_path):
    d = value_sft_dir(
        tmp_path / "joint", [1.2, 1.0, 0.8], [0.1, 0.2, 0.3], [0.0, 0.05, 0.1], [3.0, 2.5, 2.0]
    )
    sec = section(logs, tmp_path, [d])
    joint = sec.stats["joint"][str(d)]
    assert joint["steps"] == 3 and joint["runs"] == ["cur"] and joint["clip"] == [0.1, 2.0]
    assert (joint["weight_mean_first"], joint["weight_mean_last"]) == (1.2, 0.8)
    assert joint["clip_low_mean"] == pytest.approx(0.2)  # (0.1 + 0.2 + 0.3) / 3
    assert joint["clip_high_mean"] == pytest.approx(0.05)  # (0 + 0.05 + 0.1) / 3
    assert (joint["weighted_ce_first"], joint["weighted_ce_last"]) == (3.0, 2.0)
    table = next(b for b in sec.blocks if isinstance(b, Table) and "β" in b.columns)
    assert table.rows == [
        [str(d), "cur", "1.000", "[0.100, 2.000]", "3", "1.200 → 0.800", "20.0%", "5.0%",
         "3.000 → 2.000"]
    ]  # fmt: skip
    # Without valued turns the section still says how to get them, and shows the weights.
    assert isinstance(sec.blocks[0], Note) and "ddai value score" in sec.blocks[0].text


def test_no_flag_no_joint_part(logs, tmp_path):
    sec = section(logs, tmp_path, [])
    assert "joint" not in sec.stats and len(sec.blocks) == 1


def test_report_cli_takes_value_sft_and_refuses_a_folder_without_metrics(logs, tmp_path):
    d = value_sft_dir(tmp_path / "joint", [1.1, 0.9], [0.0, 0.5], [0.25, 0.0], [2.0, 1.0])
    out = tmp_path / "r.html"
    res = runner.invoke(
        app,
        ["report", "--logs", str(logs), "--out", str(out), "--value-sft", str(d), "--no-progress",
         "--browse-max", "0", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    html = out.read_text(encoding="utf-8")
    assert "fig-value-joint" in html
    stats = json.loads(re.search(r'id="report-stats"[^>]*>(.*?)</script>', html, re.S).group(1))
    found = json.dumps(stats)
    assert '"clip_low_mean": 0.25' in found and '"clip_high_mean": 0.125' in found
    bad = runner.invoke(
        app, ["report", "--logs", str(logs), "--out", str(out), "--value-sft", str(tmp_path)]
    )
    assert bad.exit_code == 2
    assert "no metrics.jsonl there; pass the --out folder of `ddai train value-sft`" in " ".join(
        bad.output.split()
    )
