"""The training rollout log (``ddai.trainer.episode.logrows.RolloutLog``): one writer per run that
commits each step's rows together, so the run's manifest lists every step once and grows by about
the same number of bytes per step (linearly), a resume's rewrite included."""

from __future__ import annotations

import itertools
import json

from ddai.pipelines import store
from ddai.trainer.episode.logrows import RolloutLog, logged_steps


def _rows(step: int, n: int = 2, start: int = 0) -> list[dict]:
    return [
        {"uid": f"u{i}", "rollout_idx": i, "step": step, "reward": 0.25 * step, "extra": {}}
        for i in range(start, start + n)
    ]


def _manifest(logs) -> dict:
    return store.run_manifest(logs, "train")


def test_a_50_step_run_lists_each_step_once_and_grows_linearly(tmp_path):
    log = RolloutLog(tmp_path, "train")
    sizes = []
    for step in range(1, 51):
        # two generations per step (gradient accumulation): queued, then committed together
        log.append(_rows(step), step)
        log.append(_rows(step, start=2), step)
        log.flush()
        sizes.append(len(json.dumps(_manifest(tmp_path), indent=2)))
    man = _manifest(tmp_path)
    assert log.steps() == logged_steps(man) == list(range(1, 51))
    assert len(man["history"]) == 49 and man["rollouts_total"] == 200 == log.rows
    assert log.rewards[0] == 0.25 and log.rewards[-1] == 12.5  # one mean reward per step
    # one manifest record per step: the growth per step stays flat (quadratic bytes would make
    # it grow with the step)
    growth = [b - a for a, b in itertools.pairwise(sizes[1:])]
    assert max(growth) - min(growth) < 64, growth
    assert store.read_rollouts(tmp_path, ["train"]).num_rows == 200


def test_a_step_is_committed_when_the_next_one_comes(tmp_path):
    log = RolloutLog(tmp_path, "train")
    log.append(_rows(1), 1)
    assert log.steps() == [] and log.rows == 0  # queued, not committed
    log.append(_rows(2), 2)
    assert log.steps() == [1] and log.rows == 2
    log.flush()
    log.flush()  # nothing queued: no empty commit
    assert log.steps() == [1, 2] and len(_manifest(tmp_path)["history"]) == 1


def test_rows_without_a_step_are_committed_at_once_and_list_no_step(tmp_path):
    log = RolloutLog(tmp_path, "train")
    log.append(_rows(0), None)
    assert log.rows == 2 and log.steps() == []


def test_a_resumed_run_keeps_one_list_of_its_steps(tmp_path):
    log = RolloutLog(tmp_path, "train")
    for step in range(1, 6):
        log.append(_rows(step), step)
    log.flush()
    # a crash after the checkpoint of step 3: the resumed run drops steps 4-5 and logs them anew
    resumed = RolloutLog(tmp_path, "train")
    assert resumed.drop_after(3) == 4
    for step in (4, 5):
        resumed.append(_rows(step), step)
    resumed.flush()
    assert resumed.steps() == [1, 2, 3, 4, 5]
    steps = store.read_rollouts(tmp_path, ["train"]).column("step").to_pylist()
    assert sorted(steps) == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_a_resumed_runs_rewrite_keeps_its_rules_recorded(tmp_path):
    """The resume's rewrite replaces the run's manifest: it records the run's rules again, so a
    later --append still finds every commit's rules (not a run that recorded none)."""
    from ddai.trainer.episode.run_rules import check_append, recorded

    rules = {"max_turns": 3, "crop_pad": 0}
    log = RolloutLog(tmp_path, "train", record={"rules": rules})
    for step in (1, 2):
        log.append(_rows(step), step)
    log.flush()
    resumed = RolloutLog(tmp_path, "train", record={"rules": rules})
    assert resumed.drop_after(1) == 2
    resumed.append(_rows(2), 2)
    resumed.flush()
    assert all(c == rules for c in recorded(store.run_manifest(tmp_path, "train")))
    assert check_append(tmp_path, "train", rules, "ddai train grpo") is None
