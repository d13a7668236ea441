"""Live tail: /api/live follows a run that training appends to, by the store's manifest version."""

from __future__ import annotations

import pytest
from conftest import SHARED
from report_world import planted_rows
from serve_world import local

from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.live import newest_run, run_versions, store_version


def _step(step: int) -> list[dict]:
    """Four rollouts of prompt u1 at ``step``: rewards 0, 1/3, 2/3, 1 shifted by the step."""
    rows = []
    for i in range(4):
        row = dict(planted_rows()["new"][0], step=step, rollout_idx=i, uid="u1")
        row["reward"] = i / 3 + step
        row["judge_score"] = 1.0 if i == 3 else 0.0
        rows.append(row)
    return rows


def _append(logs, step: int) -> None:
    """As training's RolloutLog commits a step: appended rows, the step in the manifest record."""
    store.write_run(logs, "train", _step(step), append=True, manifest={"step": step})


@pytest.fixture
def logs(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "old", planted_rows()["base"])
    _append(logs, 1)
    return logs


def test_live_api_follows_appended_steps(logs):
    c = local(create_app(ServeConfig(logs=logs)))
    first = c.get("/api/live?run=train").json()
    assert first["same"] is False and first["rollouts"] == 4
    assert [(s["step"], s["rollouts"]) for s in first["steps"]] == [(1, 4)]
    assert first["steps"][0]["mean_reward"] == pytest.approx((0 + 1 / 3 + 2 / 3 + 1) / 4 + 1)
    assert first["steps"][0]["success_rate"] == pytest.approx(0.25)
    assert first["version"] == store_version(run_versions(logs, None))
    # nothing committed: the same version, no data sent
    assert c.get(f"/api/live?run=train&since={first['version']}").json() == {
        "version": first["version"],
        "same": True,
    }
    _append(logs, 2)  # the next training step commits
    nxt = c.get(f"/api/live?run=train&since={first['version']}").json()
    assert nxt["same"] is False and nxt["version"] != first["version"]
    assert [(s["step"], s["rollouts"]) for s in nxt["steps"]] == [(1, 4), (2, 4)]
    assert nxt["groups"][0] == {
        "step": 2,
        "uid": "u1",
        "n": 4,
        "mean_reward": pytest.approx(2.5),
        "min_reward": pytest.approx(2.0),
        "max_reward": pytest.approx(3.0),
        "successes": 1,
    }
    assert c.get("/api/live?run=nope").status_code == 404


def test_live_page_follows_the_newest_run_by_default(logs):
    assert newest_run(logs, ["old", "train"]) == "train"
    c = local(create_app(ServeConfig(logs=logs)))
    html = c.get("/live").text
    assert 'data-run="train"' in html and "/static/plotly.min.js" in html
    assert 'data-run="old"' in c.get("/live?run=old").text
    res = c.get("/live?run=nosuchrun")
    assert res.status_code == 404 and "no run &#39;nosuchrun&#39;" in res.text


def test_live_api_says_whether_the_runs_format_can_carry_steps(logs, tmp_path):
    """A run ingested from DDAI's flash log never has a step: /api/live says so (the page then
    says its format records none, not that the curve comes with the first step); a run written
    by training (ddai's format) can, and one with no steps yet is just waiting for them."""
    head = tmp_path / "round0_flash_rm_detail.jsonl"
    with open(SHARED / "ddai-data" / "reconstructed" / head.name, encoding="utf-8") as fh:
        head.write_text("".join(next(fh) for _ in range(6)), encoding="utf-8")
    ingest(IngestConfig([head], logs, run_id="flash", progress=False))
    c = local(create_app(ServeConfig(logs=logs)))
    flash = c.get("/api/live?run=flash").json()
    assert flash["rollouts"] == 6 and [s["step"] for s in flash["steps"]] == [None]
    assert flash["step_source"] == {"can_carry_steps": False, "stepless_formats": ["flash"]}
    train = c.get("/api/live?run=train").json()
    assert train["step_source"] == {"can_carry_steps": True, "stepless_formats": []}
