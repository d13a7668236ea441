"""Rollout-log rows from training trajectories (DESIGN.md's schema plus step, advantage and reward
parts), so ``ddai report`` and ``ddai distill`` read training output directly; ``take_rows`` takes
scored episodes out of the ``ScoreStore`` as rows, and ``RolloutLog`` is the one writer of a
training run's rows (one manifest record per step) and of its side tables (``side_table``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.store import objstore
from ddai.pipelines.store.side_log import SideLog
from ddai.trainer.episode.rewards import Judged, Score
from ddai.trainer.episode.rollout import Trajectory
from ddai.trainer.episode.run_result import LoggedRunResult  # noqa: F401 (re-exported)
from ddai.trainer.episode.scoring import ScoreStore


def rollout_row(
    traj: Trajectory,
    *,
    run_id: str,
    step: int | None,
    advantage: float | None,
    sample_idx: int | None,
    judged: Judged | None,
    score: Score | None,
) -> dict[str, Any]:
    """One rollout-log row (a dict ``ddai.pipelines.records.schema.normalize_rollout`` accepts)."""
    ep, task = traj.episode, traj.task
    extra: dict[str, Any] = {
        "episode_key": traj.key,
        "policy_tokens": sum(traj.env_mask),
        "completion_tokens": len(traj.completion_ids),
        "out_of_budget": traj.out_of_budget,
        "search_errors": ep.search_errors,
    }
    if judged is not None and judged.error:
        extra["score_error"] = judged.error
    if score is not None and score.unscorable:
        extra["unscorable"] = score.unscorable
    return {
        "run_id": run_id,
        "step": step,
        "uid": task.uid,
        "rollout_idx": traj.rollout_idx,
        "sample_idx": sample_idx,
        "data_source": task.data_source,
        "question": task.question,
        "reference_answer": task.reference_answer,
        "file_name": task.file_name,
        "reference_pages": list(task.reference_pages),
        "response": ep.response,
        "turns": [t.to_record() for t in ep.turns],
        "retrieved_pages": list(ep.retrieved),
        "answer": judged.answer if judged else None,
        "judge_score": judged.judge if judged else None,
        "ndcg": score.ndcg if score else None,
        "format_ok": ep.format_ok,
        # An unscorable rollout was not trained on: no reward, rather than a 0 that never was.
        "reward": score.reward if score and not score.unscorable else None,
        "reward_parts": dict(score.parts) if score else None,
        "advantage": advantage,
        "num_turns": len(ep.turns),
        "terminated": ep.terminated,
        "extra": extra,
    }


def take_rows(
    store: ScoreStore,
    keys: list[str],
    advantages: list[float | None],
    *,
    run_id: str,
    step: int | None,
    first_sample: int = 0,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Take the episodes ``keys`` out of ``store`` as rollout-log rows, each with its advantage;
    ``sample_idx`` counts from ``first_sample`` (this rank's offset in the global batch);
    ``extra`` is added to every row's ``extra``."""
    rows = []
    for i, (key, adv) in enumerate(zip(keys, advantages, strict=True)):
        traj, judged, score = store.pop(key)
        row = rollout_row(
            traj,
            run_id=run_id,
            step=step,
            advantage=adv,
            sample_idx=first_sample + i,
            judged=judged,
            score=score,
        )
        row["extra"].update(extra or {})
        rows.append(row)
    return rows


def logged_steps(manifest: dict[str, Any] | None) -> list[int]:
    """The training steps a run's manifest lists, in commit order: each ``RolloutLog`` commit
    records its ``step``, a rewrite (``drop_after``) the ``steps`` it kept."""
    if manifest is None:
        return []
    out: list[int] = []
    for record in [*manifest.get("history", []), manifest]:
        if "steps" in record:
            out += record["steps"]
        elif record.get("step") is not None:
            out.append(record["step"])
    return out


@dataclass
class RolloutLog:
    """The one writer of a training run's rollouts in the log store: rows come in per step
    (``append``) and each step's rows are committed together, when the next step's rows come or
    at ``flush``, with the step in the commit's manifest record; so the manifest lists every step
    once (``logged_steps``) and grows by one record per step. Rows outside training (``step``
    None: ``ddai collect``) are committed at once."""

    logs: Path
    run_id: str
    rows: int = 0
    rewards: list[float] = field(default_factory=list)
    """Mean reward of each committed step."""
    search_errors: int = 0
    unscorable: int = 0
    record: dict[str, Any] = field(default_factory=dict)
    """Settings written into every commit's manifest record (and the resume's rewrite): the run's
    ``rules`` (``run_rules.episode_rules``; ``ddai collect``/``eval`` also the episode's
    ``crop_pad``), so the run says which rules made its rows and an append is checked against
    them."""
    _pending: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _step: int | None = None
    _side: dict[str, SideLog] = field(default_factory=dict, repr=False)

    def side_table(self, table: str) -> SideLog:
        """The run's side table ``table`` (training metrics), written through this log: rows are
        appended and listed with their hash in the run's manifest."""
        if table not in self._side:
            self._side[table] = SideLog.open(self.logs, self.run_id, table)
        return self._side[table]

    def append(self, rows: list[dict[str, Any]], step: int | None = None) -> None:
        """Queue ``rows`` of training step ``step`` (None: no step; committed at once)."""
        if self._pending and step != self._step:
            self.flush()
        self._step = step
        self._pending += rows
        if step is None:
            self.flush()

    def flush(self) -> None:
        """Commit the queued step's rows (nothing when none are queued)."""
        from ddai.pipelines.store import write_run

        rows, self._pending = self._pending, []
        if not rows:
            return
        info: dict[str, Any] = dict(self.record)
        if self._step is not None:
            info["step"] = self._step
        # side tables written before the run had a manifest are listed by its first commit
        listed = {t: s.pending for t, s in self._side.items() if s.pending is not None}
        if listed:
            info["side_tables"] = listed
        write_run(self.logs, self.run_id, rows, append=True, manifest=info or None)
        for side in self._side.values():
            side.pending = None
        self.rows += len(rows)
        self.search_errors += sum(r["extra"].get("search_errors", 0) for r in rows)
        self.unscorable += sum("unscorable" in r["extra"] for r in rows)
        rs = [r["reward"] for r in rows if r["reward"] is not None]
        if rs:
            self.rewards.append(sum(rs) / len(rs))

    def result_fields(self) -> dict[str, Any]:
        """``LoggedRunResult``'s fields of this log (call after the last ``flush``)."""
        return {
            "run_id": self.run_id,
            "logs": objstore.display(self.logs),  # a URL store as its URL, not pathlib's s3:/b/…
            "rollouts_logged": self.rows,
            "reward_first": self.rewards[0] if self.rewards else None,
            "reward_last": self.rewards[-1] if self.rewards else None,
        }

    def next_sample_idx(self) -> int:
        """One past the largest ``sample_idx`` the run already holds (0 for a new run), where
        rollouts appended to it (``--append``) number theirs from, so no key repeats."""
        import pyarrow.compute as pc

        from ddai.pipelines.store import list_runs, read_rollouts

        if self.run_id not in list_runs(self.logs):
            return 0
        top = pc.max(read_rollouts(self.logs, [self.run_id], ["sample_idx"])["sample_idx"])
        return 0 if top.as_py() is None else int(top.as_py()) + 1

    def steps(self) -> list[int]:
        """The steps the run's manifest lists (``logged_steps``)."""
        from ddai.pipelines.store import run_manifest

        return logged_steps(run_manifest(self.logs, self.run_id))

    def count_kept(self) -> int:
        """Count the run's rows already in the store into ``rows`` (a resumed run's earlier
        steps), so ``rollouts_logged`` is the run's total in the log, and take their steps' mean
        rewards into ``rewards`` (by step), so ``reward_first`` is step 1's; returns the count."""
        from ddai.pipelines.store import list_runs, read_rollouts

        self.flush()
        if self.run_id in list_runs(self.logs):
            kept = read_rollouts(self.logs, [self.run_id], ["step", "reward"]).to_pylist()
            self.rows = len(kept)
            by_step: dict[int, list[float]] = {}
            for r in kept:
                if r["step"] is not None and r["reward"] is not None:
                    by_step.setdefault(r["step"], []).append(r["reward"])
            self.rewards = [sum(v) / len(v) for _, v in sorted(by_step.items())]
        return self.rows

    def drop_after(self, step: int) -> int:
        """Remove the run's logged rollouts of steps ``> step`` (those a crashed run logged after
        its last checkpoint; the resumed run logs them anew); returns how many were dropped. The
        partition is rewritten only when there is something to drop, over the version read
        (``StoreConflict`` if another writer committed in between)."""
        import pyarrow.compute as pc

        from ddai.pipelines.store import list_runs, read_version, write_run

        self.flush()
        if self.run_id not in list_runs(self.logs):
            return 0
        table, version = read_version(self.logs, self.run_id)
        later = pc.fill_null(pc.greater(table["step"], step), False)
        dropped = int(pc.sum(later).as_py() or 0)
        if dropped:
            kept = table.filter(pc.invert(later))
            steps = sorted({s for s in kept["step"].to_pylist() if s is not None})
            write_run(
                self.logs,
                self.run_id,
                kept,
                normalize=False,
                if_unchanged=version,
                manifest={**self.record, "steps": steps},  # a replace: the rules again
            )
        return dropped
