"""``ddai runs``'s per-run rows kept by manifest version: the same rows as the ``runs`` view,
computed again for a run that changed (and only for it), never taken from a row of another
version, and still listed when the store cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import io, query, run_stats, side_log


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


# --- kept at commit: ingest writes each committed run's row, keyed by its rollout files ---------

RESP = "<think>look</think>\n<search>q</search><think>done</think><search_complete>true</search_complete>"


def _line(run: str, uid: str, i: int, judge: float, ndcg: float) -> dict:
    return {
        "run_id": run,
        "uid": uid,
        "rollout_idx": i,
        "step": 1,
        "response": RESP,
        "judge_score": judge,
        "ndcg": ndcg,
    }


def _jsonl(path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ingest(src, logs, **kw):
    return ingest(IngestConfig([src], logs, progress=False, **kw))


@pytest.fixture
def ingested(tmp_path):
    """Two runs ingested from one file: x (u1 judged 1.0 and 0.0), y (one rollout)."""
    src = _jsonl(
        tmp_path / "in.jsonl",
        [
            _line("x", "u1", 0, 1.0, 0.5),
            _line("x", "u1", 1, 0.0, 0.25),
            _line("y", "u2", 0, 1.0, 1.0),
        ],
    )
    logs = tmp_path / "logs"
    _ingest(src, logs)
    return logs


def _kept(logs, run) -> dict:
    return json.loads(run_stats.stats_path(logs, run).read_text())


def _cli_runs(logs) -> list[dict]:
    res = CliRunner().invoke(app, ["runs", "--logs", str(logs), "--json"])
    assert res.exit_code == 0, res.output
    return [
        {k: v for k, v in r.items() if k != "capabilities"} for r in json.loads(res.stdout)["runs"]
    ]


def test_ingest_keeps_each_runs_row_keyed_to_the_committed_files(ingested, monkeypatch):
    definition = run_stats._definition()
    for run in ("x", "y"):
        entry = _kept(ingested, run)
        assert entry["key"] == run_stats.key(store.run_manifest(ingested, run), definition)
    view = _view(ingested)
    assert [_kept(ingested, r)["row"] for r in ("x", "y")] == view
    assert [(r["run_id"], r["rollouts"], r["success_rate"], r["mean_ndcg"]) for r in view] == [
        ("x", 2, 0.5, 0.375),  # one of two judged rollouts succeeds; (0.5 + 0.25) / 2
        ("y", 1, 1.0, 1.0),
    ]
    calls = _computed(monkeypatch)
    assert _cli_runs(ingested) == view  # every value, read back from the kept rows
    assert calls == []  # nothing computed: DuckDB not needed by the listing
    assert run_stats.refresh(ingested, ["x", "y"]) is True and calls == []  # kept rows: no scan


def test_a_side_or_metrics_only_commit_keeps_the_row(ingested, monkeypatch):
    key_before = _kept(ingested, "x")["key"]
    version = store.read_version(ingested, "x")[1]
    side_log.SideLog.open(ingested, "x", "metrics").append({"step": 1, "loss": 0.5})
    w = store.PartitionWriter(ingested, "x", append=True)  # a commit adding notes, no rows
    w.commit({"notes": {"why": "a side-only commit"}})
    man = store.run_manifest(ingested, "x")
    assert store.manifest_version(man) != version and "metrics" in man["side_tables"]
    assert run_stats.key(man, run_stats._definition()) == key_before
    calls = _computed(monkeypatch)
    assert run_stats.runs_rows(ingested) == _view(ingested)
    assert calls == []


def test_an_append_refreshes_the_row(ingested, tmp_path, monkeypatch):
    more = _jsonl(tmp_path / "more.jsonl", [_line("x", "u3", 0, 1.0, 0.0)])
    _ingest(more, ingested, append=True)
    entry = _kept(ingested, "x")
    assert entry["key"] == run_stats.key(store.run_manifest(ingested, "x"), run_stats._definition())
    # three rollouts, two prompts, 2 of 3 succeed, ndcg (0.5 + 0.25 + 0) / 3
    row = entry["row"]
    assert (row["rollouts"], row["prompts"], row["success_rate"]) == (3, 2, pytest.approx(2 / 3))
    assert row["mean_ndcg"] == pytest.approx(0.25)
    calls = _computed(monkeypatch)
    assert _cli_runs(ingested) == _view(ingested)
    assert calls == []


def test_a_replace_by_identical_rows_is_a_new_key(ingested, tmp_path):
    before = _kept(ingested, "y")["key"]
    _ingest(_jsonl(tmp_path / "y.jsonl", [_line("y", "u2", 0, 1.0, 1.0)]), ingested)
    man = store.run_manifest(ingested, "y")
    assert _kept(ingested, "y")["key"] == run_stats.key(man, run_stats._definition()) != before


@pytest.mark.parametrize("failure", ["unwritable", "compute"])
def test_a_failed_refresh_leaves_the_commit_and_the_listing_right(tmp_path, monkeypatch, failure):
    logs = tmp_path / "logs"
    logs.mkdir()
    if failure == "unwritable":
        (logs / run_stats.STATS_DIR).write_text("a file where the folder would go")
    else:

        def broken(snap, runs):
            raise RuntimeError("computing the row failed")

        monkeypatch.setattr(run_stats, "_compute", broken)
    src = _jsonl(tmp_path / "in.jsonl", [_line("x", "u1", 0, 1.0, 0.5)])
    res = _ingest(src, logs)
    assert res.rollouts_out == 1 and store.list_runs(logs) == ["x"]
    assert store.verify_partition(store.partition_dir(logs, "x")) is None
    assert not run_stats.stats_path(logs, "x").is_file()
    assert run_stats.refresh(logs, ["x"]) is False  # said, not raised
    monkeypatch.undo()
    rows = run_stats.runs_rows(logs)
    assert [(r["run_id"], r["rollouts"], r["mean_ndcg"]) for r in rows] == [("x", 1, 0.5)]
    assert rows == _view(logs)


def test_a_row_of_an_older_version_is_never_served(ingested, monkeypatch):
    """A commit lands between the snapshot a refresh computes from and the write of its row."""
    real = run_stats._compute
    old_man = store.run_manifest(ingested, "x")

    def racing(snap, runs):
        store.write_run(ingested, "x", [_row("x", "u9", 0, 5, 1.0, 1.0)], append=True)
        return real(snap, runs)  # the snapshot's files: the version before that commit

    run_stats.stats_path(ingested, "x").unlink()
    monkeypatch.setattr(run_stats, "_compute", racing)
    assert run_stats.refresh(ingested, ["x"]) is False
    monkeypatch.undo()
    path = run_stats.stats_path(ingested, "x")
    if path.is_file():  # a row may be kept only under the key of what it was computed from
        assert _kept(ingested, "x")["key"] == run_stats.key(old_man, run_stats._definition())
    rows = run_stats.runs_rows(ingested)
    assert rows == _view(ingested)
    assert rows[0]["rollouts"] == 3 and rows[0]["last_step"] == 5


def test_a_refresh_writes_the_row_under_the_snapshots_key(ingested, monkeypatch):
    """The row is keyed by the snapshot it was computed from, and not written once a newer
    commit has landed (it would replace that commit's row)."""
    real_keep = run_stats._keep
    old_key = _kept(ingested, "x")["key"]
    run_stats.stats_path(ingested, "x").unlink()
    seen = []

    def keep(logs, run, k, definition, row):
        seen.append((k, row["rollouts"]))
        store.write_run(ingested, "x", [_row("x", "u9", 0, 5, 1.0, 1.0)], append=True)
        return real_keep(logs, run, k, definition, row)

    monkeypatch.setattr(run_stats, "_keep", keep)
    run_stats.refresh(ingested, ["x"])
    assert seen == [(old_key, 2)]
    assert not run_stats.stats_path(ingested, "x").is_file()  # the newer version's row is not it


def test_a_judge_rescore_in_place_keeps_the_new_versions_row(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    rows = [
        {**_row("r", f"u{i}", 0, 1, 0.5, 0.5), "question": "q", "reference_answer": "a"}
        for i in range(3)
    ]
    store.write_run(logs, "r", [{**r, "answer": a} for r, a in zip(rows, "aab", strict=True)])
    assert run_stats.runs_rows(logs)[0]["mean_judge"] == 0.5
    res = CliRunner().invoke(
        app, ["judge", "--logs", str(logs), "--run", "r", "--judge", "local", "--in-place"]
    )
    assert res.exit_code == 0, res.output
    entry = _kept(logs, "r")
    assert entry["key"] == run_stats.key(store.run_manifest(logs, "r"), run_stats._definition())
    view = _view(logs)
    assert entry["row"] == view[0] and view[0]["mean_judge"] != 0.5
    calls = _computed(monkeypatch)
    assert run_stats.runs_rows(logs) == view and calls == []


def test_a_refresh_racing_a_replace_keeps_no_row_of_it_and_defers_no_cleanup(ingested, monkeypatch):
    """The refresh holds no readers' lock: the replace removes the files it superseded at once
    (a refresh per concurrent writer would otherwise leave them to each one's next write), and
    the refresh keeps nothing of the version it read (its files may be gone: then it fails)."""
    real = run_stats._compute
    run_stats.stats_path(ingested, "x").unlink()

    def replaced_meanwhile(snap, runs):
        store.write_run(ingested, "x", [_row("x", "u9", 0, 5, 1.0, 1.0)])
        return real(snap, runs)

    monkeypatch.setattr(run_stats, "_compute", replaced_meanwhile)
    assert run_stats.refresh(ingested, ["x"]) is False
    monkeypatch.undo()
    man = store.run_manifest(ingested, "x")
    part = store.partition_dir(ingested, "x")
    # the superseded part is gone at once: only the listed files (and the manifest's log) remain
    assert sorted(p.name for p in part.iterdir()) == sorted(
        [store.MANIFEST, store.LOG_DIR, *(f["name"] for f in man["files"])]
    )
    assert not run_stats.stats_path(ingested, "x").is_file()
    rows = run_stats.runs_rows(ingested)
    assert rows == _view(ingested) and rows[0]["rollouts"] == 1
