"""``ddai runs``'s per-run rows kept by manifest version: the same rows as the ``runs`` view,
computed again for a run that changed (and only for it), never taken from a row of another
version, and still listed when the store cannot be written."""

from __future__ import annotations

import json

import pytest

from ddai.pipelines import io, query, run_stats, store


def _row(run: str, uid: str, i: int, step: int, judge: float | None, ndcg: float) -> dict:
    return {
        "run_id": run,
        "uid": uid,
        "rollout_idx": i,
        "step": step,
        "judge_score": judge,
        "ndcg": ndcg,
        "num_turns": 2 + i,
        "format_ok": True,
    }


@pytest.fixture
def logs(tmp_path):
    root = tmp_path / "logs"
    store.write_run(root, "a", [_row("a", "u1", 0, 1, 1.0, 0.5), _row("a", "u1", 1, 1, 0.0, 0.25)])
    store.write_run(root, "b", [_row("b", "u2", 0, 3, None, 0.75)])
    return root


def _view(root) -> list[dict]:
    return query.run_sql(query.connect(root), "SELECT * FROM runs").to_pylist()


def _computed(monkeypatch) -> list[list[str]]:
    """Record which runs each call computes."""
    calls: list[list[str]] = []
    real = run_stats._compute

    def spy(snap, runs):
        calls.append(list(runs))
        return real(snap, runs)

    monkeypatch.setattr(run_stats, "_compute", spy)
    return calls


def test_rows_are_the_views_and_the_second_listing_computes_nothing(logs, monkeypatch):
    calls = _computed(monkeypatch)
    first = run_stats.runs_rows(logs)
    assert first == _view(logs)
    assert [(r["run_id"], r["rollouts"], r["success_rate"], r["mean_ndcg"]) for r in first] == [
        ("a", 2, 0.5, 0.375),  # one of two judged rollouts succeeds; (0.5 + 0.25) / 2
        ("b", 1, None, 0.75),  # no judge score: no success rate
    ]
    second = run_stats.runs_rows(logs)
    assert calls == [["a", "b"]]  # the second listing read both rows back
    assert [[(k, type(v)) for k, v in r.items()] for r in second] == [
        [(k, type(v)) for k, v in r.items()] for r in first
    ]
    assert second == first


def test_a_changed_run_is_computed_again_and_only_it(logs, monkeypatch):
    run_stats.runs_rows(logs)
    calls = _computed(monkeypatch)
    store.write_run(logs, "a", [_row("a", "u3", 0, 7, 1.0, 1.0)], append=True)
    rows = run_stats.runs_rows(logs)
    assert calls == [["a"]]
    assert rows == _view(logs)
    assert (rows[0]["rollouts"], rows[0]["prompts"], rows[0]["last_step"]) == (3, 2, 7)


def test_a_row_of_another_version_or_a_broken_file_is_not_used(logs, monkeypatch):
    run_stats.runs_rows(logs)
    path = run_stats.stats_path(logs, "a")
    entry = json.loads(path.read_text())
    entry["key"] = "0" * 64
    entry["row"]["rollouts"] = 999
    path.write_text(json.dumps(entry))
    run_stats.stats_path(logs, "b").write_text("{not json")
    calls = _computed(monkeypatch)
    assert run_stats.runs_rows(logs) == _view(logs)
    assert calls == [["a", "b"]]
    assert json.loads(path.read_text())["row"]["rollouts"] == 2  # rewritten


def test_other_sql_means_another_key(logs):
    man = store.run_manifest(logs, "a")
    assert run_stats.key(man, "sql one") != run_stats.key(man, "sql two")
    assert run_stats.key(man, "sql one") == run_stats.key(dict(man), "sql one")


def test_a_store_that_cannot_be_written_is_still_listed(logs, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError("read-only store")

    monkeypatch.setattr(io, "write_json", refuse)
    assert run_stats.runs_rows(logs) == _view(logs)
    assert not (logs / run_stats.STATS_DIR).exists()


def test_the_stats_folder_is_no_run(logs):
    run_stats.runs_rows(logs)
    assert store.list_runs(logs) == ["a", "b"]
    assert (logs / run_stats.STATS_DIR / "a.json").is_file()
