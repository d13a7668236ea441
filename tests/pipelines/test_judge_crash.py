"""kill -9 at each commit point of ``ddai judge`` (in place and into a new run), then a rerun:
the run is its old version or its new one, whole; the rerun lands the new scores and leaves no
leftover; a new run killed before its commit is not listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_crash_consistency import killed_at
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store

RUN = "r"


def _rows(n: int) -> list[dict]:
    # the local judge scores answer "a" against reference "a" as correct: every score becomes 1.0
    return [
        {"uid": f"u{i}", "rollout_idx": 0, "step": 1, "question": "q", "reference_answer": "a",
         "answer": "a", "judge_score": 0.5}
        for i in range(n)
    ]  # fmt: skip


def _scores(logs: Path | str, run: str) -> list[float]:
    return sorted(store.read_rollouts(logs, [run]).column("judge_score").to_pylist())


def _judge(logs: Path | str, tmp: Path, *extra: str) -> list[str]:
    cache = str(tmp / "calls.sqlite")
    return ["judge", "--logs", str(logs), "--run", RUN, "--judge", "local", "--cache", cache,
            "--no-progress", *extra]  # fmt: skip


def _no_leftovers(logs: Path) -> None:
    assert not [p for p in logs.rglob(".*") if p.name.startswith((".tmp-", ".old-", ".undo"))]


@pytest.mark.parametrize(
    ("point", "new"),
    [
        ("partition-data:r", False),  # the rewritten part in place, its manifest not yet
        ("manifest-checkpoint:r", True),  # after the commit point: the new version, whole
        ("rename:_manifest.json", True),
        ("rename:r.json", True),  # `ddai runs`' row of the committed version
    ],
)
def test_judge_in_place_killed_is_old_or_new_and_the_rerun_lands(tmp_path, point, new):
    logs = tmp_path / "logs"
    store.write_run(logs, RUN, _rows(6))
    killed_at(point, *_judge(logs, tmp_path, "--in-place"))
    assert _scores(logs, RUN) == ([1.0] * 6 if new else [0.5] * 6)  # one version, whole
    assert store.verify_partition(store.partition_dir(logs, RUN)) is None
    again = CliRunner().invoke(app, _judge(logs, tmp_path, "--in-place"))
    assert again.exit_code == 0, again.output
    assert _scores(logs, RUN) == [1.0] * 6
    assert store.verify_partition(store.partition_dir(logs, RUN)) is None
    _no_leftovers(logs)


def test_judge_into_a_new_run_killed_before_its_commit_lists_no_run(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, RUN, _rows(4))
    killed_at("partition-data:r@local", *_judge(logs, tmp_path))
    assert store.list_runs(logs) == [RUN]  # the new run never committed: not listed
    assert _scores(logs, RUN) == [0.5] * 4  # the source run untouched


# On object storage the part and its manifest are first staged in a local folder (these points)
# and then put; the conditional put of the manifest's delta is the commit point.
@pytest.mark.parametrize("point", ["partition-data:r", "rename:_manifest.json"])
def test_judge_in_place_on_s3_killed_is_old_or_new_and_the_rerun_lands(s3_env, tmp_path, point):
    logs = f"{s3_env}/logs"
    store.write_run(logs, RUN, _rows(4))
    killed_at(point, *_judge(logs, tmp_path, "--in-place"))
    assert _scores(logs, RUN) == [0.5] * 4  # before the put: the old version, whole
    assert store.verify_partition(store.partition_dir(logs, RUN)) is None
    again = CliRunner().invoke(app, _judge(logs, tmp_path, "--in-place"))
    assert again.exit_code == 0, again.output
    assert _scores(logs, RUN) == [1.0] * 4
